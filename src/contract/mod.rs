//! The one door: the wire types of CONTRACT.md, typed, and the parsing of everything that
//! comes in. The task message producers publish (§2: `task` to write it, `intake` to read
//! an untrusted one into a `TaskSpec` with per-field reasons, and the budget object of §8
//! wherever a person sends one), the control messages (§2, read with their checks), and
//! the progress events with their envelope and one payload type per event type (§3),
//! written and read. The worker, the gateway, the CLI and the bench all speak the contract
//! through these types, so a new event type is one enum variant that the compiler checks
//! wherever events are produced or shown, and the JSON Schemas of the AsyncAPI document are
//! derived from the same definitions.
//!
//! Nothing here does I/O, and nothing here depends on more than `core`: sending a message
//! is an adapter's (`amqp::control` for control messages).

pub mod asyncapi;
pub mod control;
pub mod eval_rerun;
pub mod events;
pub mod intake;
pub mod task;

pub use control::ControlMessage;
pub use events::{Event, EventData, EventHead, EventType};
pub use task::TaskMessage;
