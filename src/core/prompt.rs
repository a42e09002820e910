//! The system prompt template (`prompts/system.md`, with its `{{current_state}}`
//! placeholder) and the seed message layout: `[0]` the user's input verbatim, `[1]` the
//! rendered system prompt, `[2..]` one assistant message per earlier recursion. The system
//! prompt is never repeated, so the messages grow by one compact entry per recursion.

use std::sync::Arc;

use crate::core::text::{TemplateParts, Text};
use crate::core::types::{ChatMessage, Role};

/// The placeholder the state snapshot replaces.
pub const PLACEHOLDER: &str = "{{current_state}}";

/// A system prompt template, split once around its placeholder (and escaped for JSON
/// once) so that rendering, done every recursion, copies nothing of the template: every
/// rendered prompt shares its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptTemplate {
    parts: Arc<TemplateParts>,
}

/// Why a template was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    /// The text has no `{{current_state}}`, so the model would never see the state.
    #[error("the system prompt template does not contain the placeholder {{{{current_state}}}}")]
    MissingPlaceholder,
}

impl PromptTemplate {
    /// Accepts a template containing `{{current_state}}` at least once.
    pub fn new(text: impl Into<String>) -> Result<Self, PromptError> {
        let parts = TemplateParts::split(&text.into(), PLACEHOLDER);
        if parts.holes() == 0 {
            return Err(PromptError::MissingPlaceholder);
        }
        Ok(Self {
            parts: Arc::new(parts),
        })
    }

    /// The template with every `{{current_state}}` replaced by `current_state_json`.
    pub fn render(&self, current_state_json: String) -> Text {
        Text::prompt(Arc::clone(&self.parts), current_state_json)
    }
}

/// The seed layout: `[0]` user input verbatim, `[1]` system prompt rendered, `[2..]` one
/// assistant message per earlier recursion.
pub fn build_messages(input: &str, system_prompt: Text, history: &[String]) -> Vec<ChatMessage> {
    let mut messages = Vec::with_capacity(2 + history.len());
    messages.push(ChatMessage::new(Role::User, input));
    messages.push(ChatMessage::new(Role::System, system_prompt));
    messages.extend(
        history
            .iter()
            .map(|entry| ChatMessage::new(Role::Assistant, entry.as_str())),
    );
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_without_placeholder_is_rejected() {
        assert!(matches!(
            PromptTemplate::new("no state here {{current}}"),
            Err(PromptError::MissingPlaceholder)
        ));
        assert_eq!(
            PromptError::MissingPlaceholder.to_string(),
            "the system prompt template does not contain the placeholder {{current_state}}"
        );
    }

    #[test]
    fn render_replaces_every_occurrence() {
        let template = PromptTemplate::new("a {{current_state}} b {{current_state}}").unwrap();
        assert_eq!(
            template.render("{\"x\":1}".into()),
            "a {\"x\":1} b {\"x\":1}"
        );
    }

    #[test]
    fn render_keeps_text_around_the_placeholder_verbatim() {
        let template = PromptTemplate::new("```json\n{{current_state}}\n```\n").unwrap();
        assert_eq!(template.render("{}".into()), "```json\n{}\n```\n");
        let only = PromptTemplate::new("{{current_state}}").unwrap();
        assert_eq!(only.render("S".into()), "S");
    }

    #[test]
    fn the_shipped_template_is_valid() {
        let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/prompts/system.md"));
        let template = PromptTemplate::new(text).unwrap();
        let rendered = template.render("{\"global\":{}}".into()).to_string();
        assert!(rendered.contains("```json\n{\"global\":{}}\n```"));
        assert!(!rendered.contains(PLACEHOLDER));
    }

    #[test]
    fn messages_follow_the_seed_layout() {
        let history = vec!["{\"iteration\":1}".to_string(), "{\"iteration\":2}".into()];
        let messages = build_messages("hi {{x}}", "SYSTEM".into(), &history);
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            vec![Role::User, Role::System, Role::Assistant, Role::Assistant]
        );
        assert_eq!(messages[0].content, "hi {{x}}");
        assert_eq!(messages[1].content, "SYSTEM");
        assert_eq!(messages[3].content, "{\"iteration\":2}");
        assert_eq!(build_messages("q", "s".into(), &[]).len(), 2);
    }
}
