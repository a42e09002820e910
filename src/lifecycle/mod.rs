//! A task's life between runs: what happens to a task while no run holds it, and the
//! commands people use on it. A run (`worker/`) hands a task here when it waits or ends;
//! this room never runs a task itself, it makes the task `pending` again and enqueues its
//! message, and whichever worker reads it runs it.
//!
//! - Calls held for a person: `approvals` (decide, and the expiry pass), `resolutions`
//!   (resolve a call whose outcome is unknown).
//! - Turns and children: `conversations` (one turn at a time per conversation),
//!   `delegation` (child tasks and freeing their parent).
//! - Ending or steering a task no worker holds: `unheld`; a task a dead worker left:
//!   `reconcile` (orphans), `deaths` (dead-lettered messages).
//! - Control messages (`control/`): the consumers every worker runs, who may steer, and the
//!   registry of the tasks this worker runs (`running`, `interrupt`) that they reach.
//! - The commands the CLI and the gateway share: `cancel`, `fork` (and `approvals::decide`,
//!   `resolutions::resolve`).
//! - `sweep`: the shape of every periodic pass.

pub mod approvals;
pub mod cancel;
pub mod control;
pub mod conversations;
pub mod deaths;
pub mod delegation;
pub mod fork;
pub mod interrupt;
pub mod reconcile;
pub mod resolutions;
pub mod running;
pub mod sweep;
pub mod unheld;
