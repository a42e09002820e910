//! The wire types of CONTRACT.md, typed: the task message producers publish (§2), the
//! control messages (§2), and the progress events with their envelope and one payload type
//! per event type (§3). The worker, the gateway, the CLI and the bench all speak the
//! contract through these types, so a new event type is one enum variant that the compiler
//! checks wherever events are produced or shown, and the JSON Schemas of the AsyncAPI
//! document are derived from the same definitions.
//!
//! Nothing here does I/O; parsing of untrusted task messages with per-field reasons stays
//! in `worker::intake`.

pub mod asyncapi;
pub mod control;
pub mod events;
pub mod intake;
pub mod task;

pub use control::ControlMessage;
pub use events::{Event, EventData, EventType};
pub use task::TaskMessage;
