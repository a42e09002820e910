//! Tools the agent can call (contract §5, seed 001's `ToolSource`): the [`ToolRegistry`]
//! that maps tool names to sources, checks grants and arguments and turns every outcome
//! into a [`crate::core::types::ToolCallResult`], and the built-in tools, one file each.
//!
//! - `registry`: [`ToolRegistry`].
//! - `builtin`: [`BuiltinTools`], the source offering the three built-ins.
//! - `calculate` (with the `expr` evaluator), `take_memo`, `current_time`: the built-ins.
//! - `schema`: the small JSON-schema check applied to arguments before a call.
//! - [`mcp`]: [`McpToolSource`], the tools of an MCP server (stdio child or HTTP), via rmcp.

mod builtin;
mod calculate;
mod current_time;
mod expr;
pub mod mcp;
mod registry;
mod schema;
mod take_memo;

pub use builtin::BuiltinTools;
pub use mcp::McpToolSource;
pub use registry::{BUILTIN_SOURCE, ToolInfo, ToolRegistry};
