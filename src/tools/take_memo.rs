//! The `take_memo` tool: keeps a note in the task's short-term memory. The tool itself
//! stores nothing; it returns the note as [`ToolOutput::memo`] and the machine appends it
//! to the memory that later recursions see in the state snapshot.

use serde_json::{Value, json};

use crate::core::types::ToolSpec;
use crate::ports::ToolOutput;

/// The tool's name.
pub(crate) const NAME: &str = "take_memo";

/// The longest accepted note, in characters.
const MAX_NOTE_CHARS: usize = 4000;

/// How the tool is offered to the model.
pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_owned(),
        description: format!(
            "Store a note in this task's memory; later recursions see it in the state \
             snapshot. At most {MAX_NOTE_CHARS} characters."
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "note": { "type": "string", "description": "The note to remember" }
            },
            "required": ["note"]
        }),
    }
}

/// Runs the tool.
pub(crate) fn run(arguments: &Value) -> Result<ToolOutput, String> {
    let note = arguments
        .get("note")
        .and_then(Value::as_str)
        .ok_or("missing string argument 'note'")?
        .trim();
    if note.is_empty() {
        return Err("note is empty".to_owned());
    }
    let chars = note.chars().count();
    if chars > MAX_NOTE_CHARS {
        return Err(format!(
            "note has {chars} characters; at most {MAX_NOTE_CHARS} are allowed"
        ));
    }
    Ok(ToolOutput {
        result: json!({ "stored": true, "note": note }),
        memo: Some(note.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_the_trimmed_note_as_memo() {
        let out = run(&json!({ "note": "  the answer is 42 " }));
        assert_eq!(
            out,
            Ok(ToolOutput {
                result: json!({ "stored": true, "note": "the answer is 42" }),
                memo: Some("the answer is 42".to_owned()),
            })
        );
    }

    #[test]
    fn rejects_empty_missing_and_oversized_notes() {
        assert_eq!(
            run(&json!({ "note": " " })),
            Err("note is empty".to_owned())
        );
        assert!(run(&json!({})).is_err());
        assert!(run(&json!({ "note": 5 })).is_err());
        assert!(run(&json!({ "note": "é".repeat(MAX_NOTE_CHARS) })).is_ok());
        let too_long = run(&json!({ "note": "x".repeat(MAX_NOTE_CHARS + 1) }));
        assert_eq!(
            too_long,
            Err("note has 4001 characters; at most 4000 are allowed".to_owned())
        );
    }
}
