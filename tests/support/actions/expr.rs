//! GitHub Actions expressions: `${{ }}` interpolation and `if:` conditions,
//! with GitHub's semantics where they surprise people: loose equality that
//! coerces to numbers, case-insensitive string comparison, `&&`/`||`
//! returning an operand, `.*` object filters, an `if:` without a status
//! function meaning `success() && (...)`, and a named value a place does
//! not offer (`secrets` in an `if:`) being an error.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// How the job (for a job's `if:`, its needs) or the steps so far went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Success,
    Failure,
    Cancelled,
    /// A job's need was skipped: neither success() nor failure().
    Skipped,
}

/// The named values a place offers (`github`, `env`, `steps`, ...) and the
/// status the status functions read.
#[derive(Debug, Clone)]
pub struct Contexts {
    pub values: BTreeMap<String, Value>,
    pub status: Status,
}

impl Contexts {
    pub fn new(status: Status) -> Self {
        Self { values: BTreeMap::new(), status }
    }

    pub fn with(mut self, name: &str, value: Value) -> Self {
        self.values.insert(name.into(), value);
        self
    }

    pub fn set(&mut self, name: &str, value: Value) {
        self.values.insert(name.into(), value);
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(f64),
    Str(String),
    Ident(String),
    Punct(&'static str),
}

fn tokenize(src: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '\'' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(format!("Unexpected end of expression: missing closing ' in `{src}`")),
                    Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                        s.push('\'');
                        i += 2;
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some(ch) => {
                        s.push(*ch);
                        i += 1;
                    }
                }
            }
            out.push(Token::Str(s));
            continue;
        }
        if c.is_ascii_digit() || (c == '-' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let start = i;
            i += 1;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '+' || chars[i] == '-')
            {
                // `1e-3` keeps its sign; `a-1` does not reach here.
                if (chars[i] == '+' || chars[i] == '-') && !matches!(chars[i - 1], 'e' | 'E') {
                    break;
                }
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            let n = parse_number(&text).ok_or_else(|| format!("Unexpected symbol: '{text}' in `{src}`"))?;
            out.push(Token::Num(n));
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '-') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        let punct = match two.as_str() {
            "&&" => Some("&&"),
            "||" => Some("||"),
            "==" => Some("=="),
            "!=" => Some("!="),
            "<=" => Some("<="),
            ">=" => Some(">="),
            _ => None,
        };
        if let Some(p) = punct {
            out.push(Token::Punct(p));
            i += 2;
            continue;
        }
        let one = match c {
            '(' => "(",
            ')' => ")",
            '[' => "[",
            ']' => "]",
            '.' => ".",
            ',' => ",",
            '!' => "!",
            '<' => "<",
            '>' => ">",
            '*' => "*",
            other => return Err(format!("Unexpected symbol: '{other}' in `{src}`")),
        };
        out.push(Token::Punct(one));
        i += 1;
    }
    Ok(out)
}

fn parse_number(text: &str) -> Option<f64> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok().map(|n| n as f64);
    }
    if let Some(oct) = t.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok().map(|n| n as f64);
    }
    t.parse::<f64>().ok().filter(|_| !t.is_empty() && !t.ends_with('.'))
}

#[derive(Debug, Clone)]
enum Expr {
    Lit(Value),
    Named(String),
    Call(String, Vec<Expr>),
    Prop(Box<Expr>, String),
    Index(Box<Expr>, Box<Expr>),
    Star(Box<Expr>),
    Not(Box<Expr>),
    Cmp(&'static str, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

struct Parser<'a> {
    tokens: Vec<Token>,
    pos: usize,
    src: &'a str,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(Token::Punct(q)) if *q == p) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), String> {
        if self.eat(p) { Ok(()) } else { Err(format!("Expected '{p}' in `{}`", self.src)) }
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.equality()?;
        while self.eat("&&") {
            left = Expr::And(Box::new(left), Box::new(self.equality()?));
        }
        Ok(left)
    }

    fn equality(&mut self) -> Result<Expr, String> {
        let mut left = self.comparison()?;
        loop {
            let op = if self.eat("==") {
                "=="
            } else if self.eat("!=") {
                "!="
            } else {
                return Ok(left);
            };
            left = Expr::Cmp(op, Box::new(left), Box::new(self.comparison()?));
        }
    }

    fn comparison(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        loop {
            let op = ["<=", ">=", "<", ">"].into_iter().find(|op| self.eat(op));
            let Some(op) = op else { return Ok(left) };
            left = Expr::Cmp(op, Box::new(left), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr, String> {
        let mut e = self.primary()?;
        loop {
            if self.eat(".") {
                if self.eat("*") {
                    e = Expr::Star(Box::new(e));
                    continue;
                }
                match self.peek().cloned() {
                    Some(Token::Ident(name)) => {
                        self.pos += 1;
                        e = Expr::Prop(Box::new(e), name);
                    }
                    _ => return Err(format!("Expected a property name after '.' in `{}`", self.src)),
                }
            } else if self.eat("[") {
                if self.eat("*") {
                    self.expect("]")?;
                    e = Expr::Star(Box::new(e));
                    continue;
                }
                let index = self.or()?;
                self.expect("]")?;
                e = Expr::Index(Box::new(e), Box::new(index));
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, String> {
        let Some(t) = self.peek().cloned() else {
            return Err(format!("Unexpected end of expression `{}`", self.src));
        };
        self.pos += 1;
        match t {
            Token::Num(n) => Ok(Expr::Lit(number(n))),
            Token::Str(s) => Ok(Expr::Lit(Value::String(s))),
            Token::Punct("(") => {
                let e = self.or()?;
                self.expect(")")?;
                Ok(e)
            }
            Token::Ident(name) => match name.as_str() {
                "true" => Ok(Expr::Lit(Value::Bool(true))),
                "false" => Ok(Expr::Lit(Value::Bool(false))),
                "null" => Ok(Expr::Lit(Value::Null)),
                "NaN" => Ok(Expr::Lit(Value::String("NaN".into()))),
                _ if self.eat("(") => {
                    let mut args = Vec::new();
                    if !self.eat(")") {
                        loop {
                            args.push(self.or()?);
                            if self.eat(")") {
                                break;
                            }
                            self.expect(",")?;
                        }
                    }
                    Ok(Expr::Call(name, args))
                }
                _ => Ok(Expr::Named(name)),
            },
            Token::Punct(p) => Err(format!("Unexpected symbol: '{p}' in `{}`", self.src)),
        }
    }
}

fn parse(src: &str) -> Result<Expr, String> {
    let mut p = Parser { tokens: tokenize(src)?, pos: 0, src };
    let e = p.or()?;
    if p.pos != p.tokens.len() {
        return Err(format!("Unexpected symbol after the expression in `{src}`"));
    }
    Ok(e)
}

const STATUS_FUNCTIONS: &[&str] = &["success", "failure", "cancelled", "always"];

fn has_status_function(e: &Expr) -> bool {
    match e {
        Expr::Call(name, args) => {
            STATUS_FUNCTIONS.iter().any(|f| f.eq_ignore_ascii_case(name)) || args.iter().any(has_status_function)
        }
        Expr::Prop(e, _) | Expr::Star(e) | Expr::Not(e) => has_status_function(e),
        Expr::Index(a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
            has_status_function(a) || has_status_function(b)
        }
        Expr::Lit(_) | Expr::Named(_) => false,
    }
}

/// A value, or the many values a `.*` filter produced.
enum Val {
    One(Value),
    Many(Vec<Value>),
}

impl Val {
    fn into_value(self) -> Value {
        match self {
            Val::One(v) => v,
            Val::Many(vs) => Value::Array(vs),
        }
    }
}

fn eval_expr(e: &Expr, ctx: &Contexts) -> Result<Val, String> {
    Ok(match e {
        Expr::Lit(v) => Val::One(v.clone()),
        Expr::Named(name) => {
            let found = ctx.values.iter().find(|(k, _)| k.eq_ignore_ascii_case(name));
            match found {
                Some((_, v)) => Val::One(v.clone()),
                None => return Err(format!("Unrecognized named-value: '{name}'")),
            }
        }
        Expr::Prop(inner, name) => match eval_expr(inner, ctx)? {
            Val::One(v) => Val::One(property(&v, name)),
            Val::Many(vs) => Val::Many(vs.iter().map(|v| property(v, name)).collect()),
        },
        Expr::Index(inner, index) => {
            let key = eval_expr(index, ctx)?.into_value();
            match eval_expr(inner, ctx)? {
                Val::One(v) => Val::One(index_value(&v, &key)),
                Val::Many(vs) => Val::Many(vs.iter().map(|v| index_value(v, &key)).collect()),
            }
        }
        Expr::Star(inner) => {
            let items = |v: &Value| -> Vec<Value> {
                match v {
                    Value::Array(a) => a.clone(),
                    Value::Object(o) => o.values().cloned().collect(),
                    _ => Vec::new(),
                }
            };
            match eval_expr(inner, ctx)? {
                Val::One(v) => Val::Many(items(&v)),
                Val::Many(vs) => Val::Many(vs.iter().flat_map(items).collect()),
            }
        }
        Expr::Not(inner) => Val::One(Value::Bool(!truthy(&eval_expr(inner, ctx)?.into_value()))),
        Expr::And(a, b) => {
            let left = eval_expr(a, ctx)?.into_value();
            if !truthy(&left) { Val::One(left) } else { Val::One(eval_expr(b, ctx)?.into_value()) }
        }
        Expr::Or(a, b) => {
            let left = eval_expr(a, ctx)?.into_value();
            if truthy(&left) { Val::One(left) } else { Val::One(eval_expr(b, ctx)?.into_value()) }
        }
        Expr::Cmp(op, a, b) => {
            let (l, r) = (eval_expr(a, ctx)?.into_value(), eval_expr(b, ctx)?.into_value());
            let result = match *op {
                "==" => loose_eq(&l, &r),
                "!=" => !loose_eq(&l, &r),
                _ => compare(&l, &r).is_some_and(|o| match *op {
                    "<" => o.is_lt(),
                    "<=" => o.is_le(),
                    ">" => o.is_gt(),
                    _ => o.is_ge(),
                }),
            };
            Val::One(Value::Bool(result))
        }
        Expr::Call(name, args) => Val::One(call(name, args, ctx)?),
    })
}

fn property(v: &Value, name: &str) -> Value {
    match v {
        Value::Object(o) => o
            .get(name)
            .or_else(|| o.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v))
            .cloned()
            .unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

fn index_value(v: &Value, key: &Value) -> Value {
    match (v, key) {
        (Value::Object(_), Value::String(k)) => property(v, k),
        (Value::Array(a), k) => {
            let n = to_number(k);
            if n.is_finite() && n >= 0.0 { a.get(n as usize).cloned().unwrap_or(Value::Null) } else { Value::Null }
        }
        _ => Value::Null,
    }
}

fn call(name: &str, args: &[Expr], ctx: &Contexts) -> Result<Value, String> {
    let lower = name.to_ascii_lowercase();
    let arity = |min: usize, max: usize| {
        if args.len() < min || args.len() > max {
            Err(format!("Too {} parameters supplied to '{name}'", if args.len() < min { "few" } else { "many" }))
        } else {
            Ok(())
        }
    };
    let arg = |i: usize| -> Result<Value, String> { Ok(eval_expr(&args[i], ctx)?.into_value()) };
    Ok(match lower.as_str() {
        "success" => {
            arity(0, 0)?;
            Value::Bool(ctx.status == Status::Success)
        }
        "failure" => {
            arity(0, 0)?;
            Value::Bool(ctx.status == Status::Failure)
        }
        "cancelled" => {
            arity(0, 0)?;
            Value::Bool(ctx.status == Status::Cancelled)
        }
        "always" => {
            arity(0, 0)?;
            Value::Bool(true)
        }
        "contains" => {
            arity(2, 2)?;
            let (search, item) = (arg(0)?, arg(1)?);
            Value::Bool(match &search {
                Value::Array(a) => a.iter().any(|e| loose_eq(e, &item)),
                other => to_string(other).to_lowercase().contains(&to_string(&item).to_lowercase()),
            })
        }
        "startswith" => {
            arity(2, 2)?;
            Value::Bool(to_string(&arg(0)?).to_lowercase().starts_with(&to_string(&arg(1)?).to_lowercase()))
        }
        "endswith" => {
            arity(2, 2)?;
            Value::Bool(to_string(&arg(0)?).to_lowercase().ends_with(&to_string(&arg(1)?).to_lowercase()))
        }
        "format" => {
            arity(1, usize::MAX)?;
            let template = to_string(&arg(0)?);
            let values: Vec<String> =
                (1..args.len()).map(|i| arg(i).map(|v| to_string(&v))).collect::<Result<_, _>>()?;
            format_string(&template, &values)?
        }
        "join" => {
            arity(1, 2)?;
            let sep = if args.len() == 2 { to_string(&arg(1)?) } else { ",".into() };
            match arg(0)? {
                Value::Array(a) => Value::String(a.iter().map(to_string).collect::<Vec<_>>().join(&sep)),
                other => Value::String(to_string(&other)),
            }
        }
        "tojson" => {
            arity(1, 1)?;
            Value::String(serde_json::to_string_pretty(&arg(0)?).unwrap_or_default())
        }
        "fromjson" => {
            arity(1, 1)?;
            let text = to_string(&arg(0)?);
            serde_json::from_str(&text).map_err(|e| format!("Error parsing fromJson: {e}"))?
        }
        "hashfiles" => return Err("hashFiles() is not implemented by the test runner".into()),
        _ => return Err(format!("Unrecognized function: '{name}'")),
    })
}

fn format_string(template: &str, values: &[String]) -> Result<Value, String> {
    let chars: Vec<char> = template.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '{' if chars.get(i + 1) == Some(&'{') => {
                out.push('{');
                i += 2;
            }
            '}' if chars.get(i + 1) == Some(&'}') => {
                out.push('}');
                i += 2;
            }
            '{' => {
                let end = chars[i..].iter().position(|c| *c == '}').ok_or("The format string is invalid")? + i;
                let index: String = chars[i + 1..end].iter().collect();
                let n: usize =
                    index.trim().parse().map_err(|_| format!("The format string is invalid: `{template}`"))?;
                out.push_str(
                    values.get(n).ok_or_else(|| format!("The format string `{template}` has no argument {n}"))?,
                );
                i = end + 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(Value::String(out))
}

fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map(Value::Number).unwrap_or(Value::String("NaN".into()))
    }
}

/// GitHub's number coercion: null 0, booleans 0/1, strings parsed (empty
/// is 0), arrays and objects NaN.
pub fn to_number(v: &Value) -> f64 {
    match v {
        Value::Null => 0.0,
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::String(s) if s.trim().is_empty() => 0.0,
        Value::String(s) => parse_number(s).unwrap_or(f64::NAN),
        _ => f64::NAN,
    }
}

/// Falsy: false, 0, -0, "", null, NaN.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

fn loose_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::String(x), Value::String(y)) => x.to_lowercase() == y.to_lowercase(),
        (Value::Number(_), Value::Number(_)) => to_number(a) == to_number(b),
        // Objects and arrays are equal only to themselves (the same instance).
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => false,
        _ => to_number(a) == to_number(b),
    }
}

fn compare(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::String(x), Value::String(y)) => Some(x.to_lowercase().cmp(&y.to_lowercase())),
        _ => to_number(a).partial_cmp(&to_number(b)),
    }
}

/// A value as text, the way GitHub writes it into a string.
pub fn to_string(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => format!("{}", f as i64),
            Some(f) => f.to_string(),
            None => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(_) => "Array".into(),
        Value::Object(_) => "Object".into(),
    }
}

/// Evaluates one expression (the inside of `${{ }}`).
pub fn eval(src: &str, ctx: &Contexts) -> Result<Value, String> {
    Ok(eval_expr(&parse(src)?, ctx)?.into_value())
}

/// The end of a `${{ ... }}` starting at `start` (just after `${{`): the
/// index of its `}}`, quotes respected.
fn closing(text: &str, start: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut in_string = false;
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' => in_string = !in_string,
            b'}' if !in_string && bytes.get(i + 1) == Some(&b'}') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Replaces every `${{ expr }}` in `text` by its value as text.
pub fn interpolate(text: &str, ctx: &Contexts) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = 0;
    while let Some(found) = text[rest..].find("${{") {
        let open = rest + found;
        out.push_str(&text[rest..open]);
        let end =
            closing(text, open + 3).ok_or_else(|| format!("An expression was not closed: `{}`", &text[open..]))?;
        out.push_str(&to_string(&eval(&text[open + 3..end], ctx)?));
        rest = end + 2;
    }
    out.push_str(&text[rest..]);
    Ok(out)
}

/// Interpolates a YAML value's strings (keys stay), for `with:` and `env:`.
pub fn interpolate_value(v: &Value, ctx: &Contexts) -> Result<Value, String> {
    Ok(match v {
        Value::String(s) => {
            // A value that is one expression keeps its type (a number stays a number).
            let t = s.trim();
            if t.starts_with("${{") && closing(t, 3) == Some(t.len() - 2) {
                eval(&t[3..t.len() - 2], ctx)?
            } else {
                Value::String(interpolate(s, ctx)?)
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| interpolate_value(x, ctx)).collect::<Result<_, _>>()?),
        Value::Object(o) => {
            let mut m = Map::new();
            for (k, x) in o {
                m.insert(k.clone(), interpolate_value(x, ctx)?);
            }
            Value::Object(m)
        }
        other => other.clone(),
    })
}

/// An `if:` condition: written with or without `${{ }}`; without a status
/// function it means `success() && (...)`.
pub fn condition(src: &str, ctx: &Contexts) -> Result<bool, String> {
    let t = src.trim();
    let expr = if t.starts_with("${{") && closing(t, 3) == Some(t.len() - 2) {
        parse(&t[3..t.len() - 2])?
    } else if t.contains("${{") {
        // GitHub's trap: text around an expression makes the whole a
        // (non-empty, so true) string.
        Expr::Lit(Value::String(interpolate(t, ctx)?))
    } else {
        parse(t)?
    };
    let expr = if has_status_function(&expr) {
        expr
    } else {
        Expr::And(Box::new(Expr::Call("success".into(), Vec::new())), Box::new(expr))
    };
    Ok(truthy(&eval_expr(&expr, ctx)?.into_value()))
}
