//! The system prompt template (`prompts/system.md`, with its `{{current_state}}`
//! placeholder) and the seed message layout: `[0]` the user's input verbatim, `[1]` the
//! rendered system prompt, `[2..]` one assistant message per earlier recursion. The system
//! prompt is never repeated, so the messages grow by one compact entry per recursion.

use std::sync::Arc;

use crate::core::text::{TemplateParts, Text};
use crate::core::types::{ChatMessage, Role};

/// The placeholder the state snapshot replaces.
pub const PLACEHOLDER: &str = "{{current_state}}";

/// The heading of the agent's instructions section (CONTRACT §11).
pub const INSTRUCTIONS_HEADING: &str = "## Agent instructions";

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

    /// The template with the agent's `instructions` (CONTRACT §11) in a section of their
    /// own, verbatim, in front of the section that holds the state snapshot (before the
    /// last `## ` heading ahead of the first placeholder; at the very start when there is
    /// none). Empty or absent instructions: the template unchanged. Rendered once per
    /// request like the rest of the template, so the system message holds them once.
    pub fn with_instructions(&self, instructions: Option<&str>) -> Self {
        let Some(instructions) = instructions.filter(|text| !text.trim().is_empty()) else {
            return self.clone();
        };
        let head = self.parts.head();
        let at = head.rfind("\n## ").map_or(0, |newline| newline + 1);
        let section = format!("{INSTRUCTIONS_HEADING}\n\n{instructions}\n\n");
        Self {
            parts: Arc::new(self.parts.inserted(at, &section)),
        }
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
    fn instructions_go_verbatim_in_front_of_the_state_section_once() {
        let text = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/prompts/system.md"));
        let template = PromptTemplate::new(text).unwrap();
        let brief =
            "You are Ada. Answer in French.\nNever say {{current_state}} \"quoted\" \u{1F600}";
        let rendered = (template.with_instructions(Some(brief)))
            .render("{\"global\":{}}".into())
            .to_string();
        assert_eq!(rendered.matches(brief).count(), 1);
        assert_eq!(rendered.matches(INSTRUCTIONS_HEADING).count(), 1);
        let brief_at = rendered.find(brief).unwrap();
        let state_at = rendered.find("{\"global\":{}}").unwrap();
        assert!(brief_at < state_at);
        // The seed frame stays: what is left without the section is the plain rendering.
        let section = format!("{INSTRUCTIONS_HEADING}\n\n{brief}\n\n");
        let plain = template.render("{\"global\":{}}".into()).to_string();
        assert_eq!(rendered.replacen(&section, "", 1), plain);
        // The section sits right before the heading of the section holding the snapshot.
        assert!(rendered[brief_at..].contains(&format!("{brief}\n\n## ")));
    }

    #[test]
    fn no_instructions_leave_the_template_alone() {
        let template = PromptTemplate::new("a\n## S\n{{current_state}}").unwrap();
        for none in [None, Some(""), Some("  \n")] {
            assert_eq!(template.with_instructions(none), template);
        }
        let bare = PromptTemplate::new("{{current_state}}").unwrap();
        let rendered = bare.with_instructions(Some("brief")).render("S".into());
        assert_eq!(
            rendered.to_string(),
            format!("{INSTRUCTIONS_HEADING}\n\nbrief\n\nS")
        );
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
