pub mod gateway;
pub mod harness;
pub mod observe;
pub mod process;
pub mod schema;
pub mod tools;
pub mod wait;
pub mod words;
