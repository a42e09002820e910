//! The arithmetic evaluator behind `calculate`: a hand-written recursive-descent parser that
//! evaluates while it parses. Bounded on purpose, because the input comes from a model:
//! at most [`MAX_LEN`] characters and [`MAX_DEPTH`] nested levels (parentheses, function
//! calls, unary signs, exponents), so no input can overflow the stack; every failure is a
//! typed [`ExprError`], never a panic.
//!
//! Grammar (`^` binds tighter than unary minus and is right-associative, so `-2^2 = -4`
//! and `2^3^2 = 512`; `**` is accepted as `^`):
//! ```text
//! expr    := term (('+' | '-') term)*
//! term    := unary (('*' | '/' | '%') unary)*
//! unary   := ('-' | '+') unary | power
//! power   := primary ('^' unary)?
//! primary := number | constant | function '(' expr (',' expr)* ')' | '(' expr ')'
//! ```

/// The longest accepted expression, in characters.
pub(crate) const MAX_LEN: usize = 1000;
/// The deepest accepted nesting.
pub(crate) const MAX_DEPTH: usize = 64;

/// Why an expression could not be evaluated; the message is shown to the model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ExprError {
    #[error("expression is empty")]
    Empty,
    #[error("expression is longer than {MAX_LEN} characters")]
    TooLong,
    #[error("expression is nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("unexpected {found} at position {position}")]
    Unexpected { found: String, position: usize },
    #[error("invalid number '{0}'")]
    BadNumber(String),
    #[error("unknown identifier '{0}' (constants: pi, e; functions: {FUNCTIONS})")]
    UnknownIdentifier(String),
    #[error("{name} expects {expected} argument(s), got {got}")]
    Arity {
        name: String,
        expected: &'static str,
        got: usize,
    },
    #[error("division by zero")]
    DivisionByZero,
    #[error("{0} is not a finite number")]
    NonFinite(String),
}

const FUNCTIONS: &str = "sqrt abs sin cos tan ln log10 log2 exp floor ceil round min max pow";

/// Evaluates `input`; the result is always finite.
pub(crate) fn evaluate(input: &str) -> Result<f64, ExprError> {
    if input.chars().count() > MAX_LEN {
        return Err(ExprError::TooLong);
    }
    let chars: Vec<char> = input.chars().collect();
    let mut parser = Parser {
        chars,
        pos: 0,
        depth: 0,
    };
    parser.skip_space();
    if parser.peek().is_none() {
        return Err(ExprError::Empty);
    }
    let value = parser.expr()?;
    parser.skip_space();
    match parser.peek() {
        None => finite(value, "the result"),
        Some(_) => Err(parser.unexpected()),
    }
}

fn finite(value: f64, what: &str) -> Result<f64, ExprError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(ExprError::NonFinite(what.to_owned()))
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// Consumes `c` (after spaces) when it is next.
    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn at_double_star(&self) -> bool {
        matches!(self.chars.get(self.pos..self.pos + 2), Some(['*', '*']))
    }

    fn eat_power(&mut self) -> bool {
        if self.eat('^') {
            return true;
        }
        if self.at_double_star() {
            self.pos += 2;
            return true;
        }
        false
    }

    fn unexpected(&self) -> ExprError {
        let found = match self.peek() {
            Some(c) => format!("'{c}'"),
            None => "end of expression".to_owned(),
        };
        ExprError::Unexpected {
            found,
            position: self.pos,
        }
    }

    /// Runs `inner` one nesting level deeper, failing past [`MAX_DEPTH`].
    fn nested<T>(
        &mut self,
        inner: impl FnOnce(&mut Self) -> Result<T, ExprError>,
    ) -> Result<T, ExprError> {
        if self.depth >= MAX_DEPTH {
            return Err(ExprError::TooDeep);
        }
        self.depth += 1;
        let result = inner(self);
        self.depth -= 1;
        result
    }

    fn expr(&mut self) -> Result<f64, ExprError> {
        let mut value = self.term()?;
        loop {
            if self.eat('+') {
                value = finite(value + self.term()?, "a sum")?;
            } else if self.eat('-') {
                value = finite(value - self.term()?, "a difference")?;
            } else {
                return Ok(value);
            }
        }
    }

    fn term(&mut self) -> Result<f64, ExprError> {
        let mut value = self.unary()?;
        loop {
            self.skip_space();
            if !self.at_double_star() && self.eat('*') {
                value = finite(value * self.unary()?, "a product")?;
            } else if self.eat('/') {
                let divisor = self.unary()?;
                if divisor == 0.0 {
                    return Err(ExprError::DivisionByZero);
                }
                value = finite(value / divisor, "a quotient")?;
            } else if self.eat('%') {
                let divisor = self.unary()?;
                if divisor == 0.0 {
                    return Err(ExprError::DivisionByZero);
                }
                value = finite(value % divisor, "a remainder")?;
            } else {
                return Ok(value);
            }
        }
    }

    fn unary(&mut self) -> Result<f64, ExprError> {
        if self.eat('-') {
            return self.nested(|p| p.unary()).map(|v| -v);
        }
        if self.eat('+') {
            return self.nested(|p| p.unary());
        }
        self.power()
    }

    fn power(&mut self) -> Result<f64, ExprError> {
        let base = self.primary()?;
        self.skip_space();
        if !self.eat_power() {
            return Ok(base);
        }
        let exponent = self.nested(|p| p.unary())?;
        finite(base.powf(exponent), "a power")
    }

    fn primary(&mut self) -> Result<f64, ExprError> {
        self.skip_space();
        match self.peek() {
            Some('(') => {
                self.pos += 1;
                let value = self.nested(|p| p.expr())?;
                if self.eat(')') {
                    Ok(value)
                } else {
                    Err(self.unexpected())
                }
            }
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            Some(c) if c.is_alphabetic() || c == '_' => self.identifier(),
            _ => Err(self.unexpected()),
        }
    }

    fn number(&mut self) -> Result<f64, ExprError> {
        let start = self.pos;
        self.take_while(|c| c.is_ascii_digit() || c == '.');
        if matches!(self.peek(), Some('e' | 'E')) {
            let next = self.chars.get(self.pos + 1).copied();
            let after = self.chars.get(self.pos + 2).copied();
            let signed =
                matches!(next, Some('+' | '-')) && after.is_some_and(|c| c.is_ascii_digit());
            if next.is_some_and(|c| c.is_ascii_digit()) || signed {
                self.pos += if signed { 2 } else { 1 };
                self.take_while(|c| c.is_ascii_digit());
            }
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        text.parse::<f64>()
            .map_err(|_| ExprError::BadNumber(text.clone()))
            .and_then(|v| finite(v, &format!("the number {text}")))
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) {
        while self.peek().is_some_and(&keep) {
            self.pos += 1;
        }
    }

    fn identifier(&mut self) -> Result<f64, ExprError> {
        let start = self.pos;
        self.take_while(|c| c.is_alphanumeric() || c == '_');
        let name: String = self.chars[start..self.pos].iter().collect();
        let name = name.to_lowercase();
        if self.eat('(') {
            let args = self.nested(|p| p.arguments())?;
            return call(&name, &args);
        }
        match name.as_str() {
            "pi" => Ok(std::f64::consts::PI),
            "e" => Ok(std::f64::consts::E),
            _ => Err(ExprError::UnknownIdentifier(name)),
        }
    }

    /// The comma-separated arguments after `(`, through the closing `)`.
    fn arguments(&mut self) -> Result<Vec<f64>, ExprError> {
        let mut args = Vec::new();
        if self.eat(')') {
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            if self.eat(')') {
                return Ok(args);
            }
            if !self.eat(',') {
                return Err(self.unexpected());
            }
        }
    }
}

/// Applies a named function.
fn call(name: &str, args: &[f64]) -> Result<f64, ExprError> {
    let arity = |expected: &'static str| ExprError::Arity {
        name: name.to_owned(),
        expected,
        got: args.len(),
    };
    let value = match (name, args) {
        ("min" | "max", []) => return Err(arity("at least 1")),
        ("min", _) => args.iter().copied().fold(f64::INFINITY, f64::min),
        ("max", _) => args.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ("pow", [base, exponent]) => base.powf(*exponent),
        ("pow", _) => return Err(arity("2")),
        (_, [x]) => unary_function(name, *x)?,
        _ if unary_function(name, 0.0).is_ok() => return Err(arity("1")),
        _ => return Err(ExprError::UnknownIdentifier(name.to_owned())),
    };
    finite(value, &format!("{name}(...)"))
}

fn unary_function(name: &str, x: f64) -> Result<f64, ExprError> {
    Ok(match name {
        "sqrt" => x.sqrt(),
        "abs" => x.abs(),
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tan" => x.tan(),
        "ln" => x.ln(),
        "log10" => x.log10(),
        "log2" => x.log2(),
        "exp" => x.exp(),
        "floor" => x.floor(),
        "ceil" => x.ceil(),
        "round" => x.round(),
        _ => return Err(ExprError::UnknownIdentifier(name.to_owned())),
    })
}
