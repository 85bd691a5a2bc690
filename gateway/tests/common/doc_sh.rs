//! The `sh` code blocks of a markdown page, read as a reader would paste them: each block's
//! name (the `<!-- runs: NAME -->` line just before its fence), and a command split into the
//! words a POSIX shell would hand the program, without running a shell. Enough of the shell
//! for the examples the docs hold: `#` comments, `\` line continuations, single quotes, double
//! quotes, `$NAME` and `${NAME}`, `&&`.
//!
//! No shell runs the examples, so that a test controls exactly what reaches the program's
//! command line (a secret must not) and every variable an example uses is one it knows.

/// One fenced ```` ```sh ```` block of a markdown page.
#[derive(Debug, Clone)]
pub struct ShBlock {
    /// From `<!-- runs: NAME -->` on the last non-blank line before the fence, if there.
    pub name: Option<String>,
    /// The fence's line, counted from 1 (for messages).
    pub line: usize,
    /// The lines between the fences.
    pub text: String,
}

/// Every ```` ```sh ```` block of `markdown`, in order.
pub fn sh_blocks(markdown: &str) -> Vec<ShBlock> {
    let mut blocks = Vec::new();
    // The last non-blank line outside a fence, cleared by every fence line, so that a
    // block's name is only ever the line right before its own fence.
    let mut before: Option<&str> = None;
    let mut open: Option<ShBlock> = None;
    let mut in_other_fence = false;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim();
        // CommonMark: a closing fence carries no info string.
        let closing = trimmed == "```";
        if let Some(block) = open.as_mut() {
            if closing {
                blocks.extend(open.take());
            } else {
                block.text.push_str(line);
                block.text.push('\n');
            }
            before = None;
        } else if in_other_fence {
            in_other_fence = !closing;
            before = None;
        } else if trimmed == "```sh" {
            let name = before
                .and_then(|l| l.strip_prefix("<!-- runs:"))
                .and_then(|l| l.strip_suffix("-->"))
                .map(|n| n.trim().to_string());
            open = Some(ShBlock {
                name,
                line: i + 1,
                text: String::new(),
            });
            before = None;
        } else if trimmed.starts_with("```") {
            in_other_fence = true;
            before = None;
        } else if !trimmed.is_empty() {
            before = Some(trimmed);
        }
    }
    blocks
}

/// The commands of a block: `\`-newline continuations joined, whole-line comments and blank
/// lines dropped, one command a line.
pub fn commands(block: &str) -> Vec<String> {
    block
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// A command's words as written (quotes kept), up to an unquoted `#` that starts a word.
/// Panics on an unclosed quote: a reader pasting it would be left at a `>` prompt.
pub fn raw_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            '#' if word.is_empty() => break,
            '\'' | '"' => {
                word.push(c);
                loop {
                    let Some(q) = chars.next() else {
                        panic!("an unclosed {c} in: {command}");
                    };
                    word.push(q);
                    if q == '\\' && c == '"' {
                        if let Some(escaped) = chars.next() {
                            word.push(escaped);
                        }
                    } else if q == c {
                        break;
                    }
                }
            }
            '\\' => {
                word.push(c);
                if let Some(escaped) = chars.next() {
                    word.push(escaped);
                }
            }
            _ => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// One raw word as the shell hands it to the program: quotes removed, `$NAME` and `${NAME}`
/// replaced with `var(NAME)` outside single quotes, backslash escapes resolved.
pub fn expand(raw: &str, var: &mut dyn FnMut(&str) -> String) -> String {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    let mut in_double = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' if !in_double => {
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    out.push(q);
                }
            }
            '"' => in_double = !in_double,
            '\\' => {
                if let Some(escaped) = chars.next() {
                    // Inside double quotes a backslash escapes only these; elsewhere it stays.
                    if in_double && !matches!(escaped, '"' | '\\' | '$' | '`') {
                        out.push('\\');
                    }
                    out.push(escaped);
                }
            }
            '$' => {
                let braced = chars.next_if_eq(&'{').is_some();
                let mut name = String::new();
                while let Some(n) = chars.next_if(|n| n.is_ascii_alphanumeric() || *n == '_') {
                    name.push(n);
                }
                if braced {
                    assert_eq!(chars.next(), Some('}'), "an unclosed ${{ in: {raw}");
                }
                assert!(!name.is_empty(), "a bare $ in: {raw}");
                out.push_str(&var(&name));
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_names_and_words() {
        let page = "text\n<!-- runs: one -->\n\n```sh\n# a comment\ncurl -s \\\n  \"$A/x\" 'b c' # tail\n```\n```text\n```sh\n```\n```sh\nexport X=1\n```\n";
        let blocks = sh_blocks(page);
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        assert_eq!(blocks[0].name.as_deref(), Some("one"));
        assert_eq!(blocks[0].line, 4);
        assert_eq!(blocks[1].name, None);
        let cmds = commands(&blocks[0].text);
        assert_eq!(cmds.len(), 1, "{cmds:?}");
        let words = raw_words(&cmds[0]);
        assert_eq!(words, ["curl", "-s", "\"$A/x\"", "'b c'"]);
        let mut var = |n: &str| format!("<{n}>");
        assert_eq!(expand(&words[2], &mut var), "<A>/x");
        assert_eq!(expand(&words[3], &mut var), "b c");
        assert_eq!(expand("'$A'\"${B}\\\"\"", &mut var), "$A<B>\"");
    }
}
