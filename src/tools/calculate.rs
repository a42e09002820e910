//! The `calculate` tool: evaluates an arithmetic expression given as a string (see
//! `expr` for the grammar and bounds) and returns a JSON number; integral results within
//! ±2^53 come back as JSON integers (`4`, not `4.0`).

use serde_json::{Number, Value, json};

use crate::core::types::ToolSpec;
use crate::ports::ToolOutput;

use super::expr::{self, MAX_LEN};

/// The tool's name.
pub(crate) const NAME: &str = "calculate";

/// The largest magnitude below which every integer is exact in an `f64`.
const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// How the tool is offered to the model.
pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_owned(),
        description: format!(
            "Evaluate an arithmetic expression and return the number. Operators: + - * / % ^ \
             (power, right-associative), parentheses, unary minus. Functions: sqrt abs sin cos \
             tan ln log10 log2 exp floor ceil round min max pow. Constants: pi, e. At most \
             {MAX_LEN} characters."
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "The expression, e.g. (2 + 3) * 4 ^ 2 or sqrt(2) * pi"
                }
            },
            "required": ["expression"]
        }),
    }
}

/// Runs the tool.
pub(crate) fn run(arguments: &Value) -> Result<ToolOutput, String> {
    let expression = arguments
        .get("expression")
        .and_then(Value::as_str)
        .ok_or("missing string argument 'expression'")?;
    let value = expr::evaluate(expression).map_err(|e| e.to_string())?;
    Ok(ToolOutput {
        result: number(value),
        memo: None,
    })
}

/// A finite `f64` as a JSON number, integral when that is exact.
fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() <= MAX_EXACT_INTEGER {
        // Exact: the value is integral and within the range where i64 and f64 agree.
        return Value::from(value as i64);
    }
    Number::from_f64(value).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::expr::{ExprError, MAX_DEPTH, evaluate};
    use super::*;

    fn calc(expression: &str) -> Result<Value, String> {
        run(&json!({ "expression": expression })).map(|out| out.result)
    }

    fn close(expression: &str, expected: f64) {
        match evaluate(expression) {
            Ok(got) => assert!((got - expected).abs() < 1e-9, "{expression} = {got}"),
            Err(e) => panic!("{expression}: {e}"),
        }
    }

    #[test]
    fn precedence_and_associativity() {
        close("1 + 2 * 3", 7.0);
        close("(1 + 2) * 3", 9.0);
        close("10 - 4 - 3", 3.0);
        close("100 / 10 / 5", 2.0);
        close("2 ^ 3 ^ 2", 512.0);
        close("2 ** 3 ** 2", 512.0);
        close("-2 ^ 2", -4.0);
        close("(-2) ^ 2", 4.0);
        close("2 ^ -1", 0.5);
        close("2 * -3", -6.0);
        close("--3", 3.0);
        close("+4", 4.0);
        close("7 % 4 * 2", 6.0);
        close("-7 % 4", -3.0);
        close("2 + 3 * 4 ^ 2 / 8 - 1", 7.0);
        close("1.5e3 + .5 + 2E-1", 1500.7);
    }

    #[test]
    fn functions_and_constants() {
        close("sqrt(16) + abs(-2)", 6.0);
        close("sin(pi / 2) + cos(0) + tan(0)", 2.0);
        close("ln(e) + log10(1000) + log2(8)", 7.0);
        close("exp(0) + floor(2.7) + ceil(2.1) + round(2.5)", 9.0);
        close("min(3, 1, 2) + max(3, 1, 2) + pow(2, 10)", 1028.0);
        close("max(-1)", -1.0);
        close("SQRT(4) + PI - pi", 2.0);
        close("sqrt((((4))))", 2.0);
    }

    #[test]
    fn results_are_json_numbers() {
        assert_eq!(calc("2 + 2"), Ok(json!(4)));
        assert_eq!(calc("-0.0 * 1"), Ok(json!(0)));
        assert_eq!(calc("1 / 4"), Ok(json!(0.25)));
        assert_eq!(calc("2 ^ 53"), Ok(json!(9_007_199_254_740_992_i64)));
        assert_eq!(calc("2 ^ 60"), Ok(json!(1.152_921_504_606_847e18)));
        assert_eq!(calc("10 / 4").map(|v| v.to_string()), Ok("2.5".to_owned()));
    }

    #[test]
    fn errors_are_precise() {
        let err = |e: &str| evaluate(e).err();
        assert_eq!(err("1 / 0"), Some(ExprError::DivisionByZero));
        assert_eq!(err("1 % (2 - 2)"), Some(ExprError::DivisionByZero));
        assert_eq!(
            err("foo + 1"),
            Some(ExprError::UnknownIdentifier("foo".into()))
        );
        assert_eq!(
            err("log(10)"),
            Some(ExprError::UnknownIdentifier("log".into()))
        );
        assert!(matches!(err("sqrt(-1)"), Some(ExprError::NonFinite(_))));
        assert!(matches!(err("10 ^ 400"), Some(ExprError::NonFinite(_))));
        assert!(matches!(err("exp(1000)"), Some(ExprError::NonFinite(_))));
        assert!(matches!(err("1e999"), Some(ExprError::NonFinite(_))));
        assert!(matches!(err("sqrt(1, 2)"), Some(ExprError::Arity { .. })));
        assert!(matches!(err("pow(2)"), Some(ExprError::Arity { .. })));
        assert!(matches!(err("min()"), Some(ExprError::Arity { .. })));
        assert_eq!(err(""), Some(ExprError::Empty));
        assert_eq!(err("   "), Some(ExprError::Empty));
        assert_eq!(err("1.2.3"), Some(ExprError::BadNumber("1.2.3".into())));
        let position = |e: &str| match evaluate(e) {
            Err(ExprError::Unexpected { position, .. }) => Some(position),
            _ => None,
        };
        assert_eq!(position("2 +"), Some(3));
        assert_eq!(position("(1 + 2"), Some(6));
        assert_eq!(position("2 3"), Some(2));
        assert_eq!(position("2(3)"), Some(1));
        assert_eq!(position("1 + * 2"), Some(4));
        assert_eq!(position("2e"), Some(1));
    }

    #[test]
    fn tool_errors_name_the_problem() {
        assert_eq!(calc("1/0"), Err("division by zero".to_owned()));
        let missing = run(&json!({ "expr": "1" })).map(|o| o.result);
        assert_eq!(
            missing,
            Err("missing string argument 'expression'".to_owned())
        );
        let unknown = calc("x").err().unwrap_or_default();
        assert!(unknown.contains("unknown identifier 'x'"), "{unknown}");
        assert!(unknown.contains("sqrt"), "{unknown}");
    }

    #[test]
    fn size_and_depth_are_bounded() {
        let long = format!("1{}", "+1".repeat(MAX_LEN / 2));
        assert_eq!(evaluate(&long), Err(ExprError::TooLong));
        let fits = format!("1{}", "+1".repeat(MAX_LEN / 2 - 1));
        assert_eq!(evaluate(&fits), Ok((MAX_LEN / 2) as f64));
        let parens = |n: usize| format!("{}1{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(evaluate(&parens(MAX_DEPTH)), Ok(1.0));
        assert_eq!(evaluate(&parens(MAX_DEPTH + 1)), Err(ExprError::TooDeep));
        assert_eq!(evaluate(&"-".repeat(900)), Err(ExprError::TooDeep));
        assert_eq!(evaluate(&"2^".repeat(400)), Err(ExprError::TooDeep));
        assert_eq!(evaluate(&"sqrt(".repeat(150)), Err(ExprError::TooDeep));
        assert_eq!(evaluate(&"(".repeat(MAX_LEN)), Err(ExprError::TooDeep));
    }

    #[test]
    fn garbage_never_panics() {
        let pieces = [
            "(", ")", "+", "-", "*", "/", "%", "^", "**", ",", ".", "e", "E", "1", "0", "9.", "pi",
            "sqrt", "min(", "max", " ", "é", "∞", "\u{0}", "_", "1e", "e+", "NaN", "inf",
        ];
        // A deterministic pseudo-random walk over the pieces (xorshift), many lengths.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..5_000 {
            let mut input = String::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 40) as usize;
            for _ in 0..len {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                input.push_str(pieces[(state % pieces.len() as u64) as usize]);
            }
            if let Ok(value) = evaluate(&input) {
                assert!(value.is_finite(), "{input:?} gave {value}");
            }
        }
    }
}
