//! The little of shell syntax the advice reads: the words of a script's last line when it
//! is a plain `exec`, and quoting words back for a command line to copy.

/// A word of a shell command line as far as the advice needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Word {
    /// Text without expansions, quotes removed.
    Literal(String),
    /// `"$@"` or `$@`: the script's arguments.
    Args,
    /// Anything that expands (`"$program"`, `$(…)`), as written.
    Expands(String),
}

impl Word {
    pub(super) fn as_written(&self) -> String {
        match self {
            Word::Literal(w) => quote(w),
            Word::Args => "\"$@\"".to_string(),
            Word::Expands(w) => w.clone(),
        }
    }
}

/// The words after `exec` on the script's last line of code, if it is a plain `exec` of a
/// command: quotes and a comment after it are understood, and anything more (`;`, `|`,
/// redirections, a line continued) makes it one this does not read.
pub(super) fn last_exec(text: &str) -> Option<Vec<Word>> {
    let line = text
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with('#'))?;
    let rest = line.strip_prefix("exec")?;
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let words = split(rest)?;
    (!words.is_empty()).then_some(words)
}

/// Splits a simple command line into words; `None` for what this does not read.
fn split(line: &str) -> Option<Vec<Word>> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if matches!(chars.peek(), None | Some('#')) {
            return Some(words);
        }
        let (mut text, mut raw, mut expands) = (String::new(), String::new(), false);
        let mut quote: Option<char> = None;
        while let Some(&c) = chars.peek() {
            if quote.is_none() && c.is_whitespace() {
                break;
            }
            chars.next();
            raw.push(c);
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), _) if c == q => quote = None,
                (None, ';' | '&' | '|' | '<' | '>' | '(' | ')' | '\\' | '`') => return None,
                (Some('"'), '`' | '\\') => return None,
                (q, '$') if q != Some('\'') => {
                    expands = true;
                    text.push(c);
                }
                _ => text.push(c),
            }
        }
        if quote.is_some() {
            return None;
        }
        words.push(match (expands, text.as_str()) {
            (true, "$@") => Word::Args,
            (true, _) => Word::Expands(raw),
            (false, _) => Word::Literal(text),
        });
    }
}

/// `word` as a shell reads it back: as it is if it is plain, else in single quotes.
pub(super) fn quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./,:=+@%^-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
