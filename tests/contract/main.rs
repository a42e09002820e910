//! Tier `contract`: what crosses agentd's boundaries, checked from the outside. The AsyncAPI
//! document against the events the tests observe (`asyncapi`), the task message at the door:
//! bad, huge, duplicate and foreign messages (`intake`), the OpenAI-compatible wire of the
//! LLM client (`llm_client`) and of the scripted model every other tier talks to
//! (`scripted_model`, the model's own test).
//!
//! A new test goes here when it is about a message's shape or the door it comes through,
//! not about what a task does after it got in. `cargo test --test contract [FILTER]`.

#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod asyncapi;
mod intake;
mod llm_client;
mod scripted_model;
