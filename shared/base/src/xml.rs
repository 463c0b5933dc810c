//! The reader of the XML a model writes (the historian's `<history>`, a
//! dreamer task's manifest): strict on structure, lenient on text.
//!
//! A [`Cursor`] walks the body of the root element: whitespace and comments
//! are skipped, a tag is recognised by its name, attributes are quoted and
//! appear once, and an element's text runs to its own closing tag, so it may
//! hold `<`, `&` and code. Every fault is an `Err` of one sentence (it goes
//! into a repair prompt and a failure record); the cursor never panics and
//! only moves over whole characters and tags.

/// A position in the body of the root element.
pub struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(text: &'a str) -> Self {
        Cursor { text, pos: 0 }
    }

    /// The text from the cursor on (empty at or past the end).
    pub fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or_default()
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    /// Move to `rest`, a suffix of the text.
    fn advance_to(&mut self, rest: &str) {
        self.pos = self.text.len().saturating_sub(rest.len());
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.advance_to(rest.trim_start());
    }

    pub fn skip_space_and_comments(&mut self) -> Result<(), String> {
        loop {
            self.skip_space();
            let Some(comment) = self.rest().strip_prefix("<!--") else {
                return Ok(());
            };
            let end = comment.find("-->").ok_or("a comment is never closed")?;
            self.advance_to(comment.get(end + 3..).unwrap_or_default());
        }
    }

    /// `<name` followed by whitespace, `>` or `/`.
    pub fn starts_tag(&self, name: &str) -> bool {
        self.rest()
            .strip_prefix('<')
            .and_then(|r| r.strip_prefix(name))
            .and_then(|r| r.chars().next())
            .is_some_and(|c| c.is_whitespace() || c == '>' || c == '/')
    }

    /// Consume `</name>` if it comes next.
    pub fn close_tag(&mut self, name: &str) -> bool {
        let after = self
            .rest()
            .strip_prefix("</")
            .and_then(|r| r.strip_prefix(name))
            .and_then(|r| r.strip_prefix('>'));
        if let Some(after) = after {
            self.advance_to(after);
        }
        after.is_some()
    }

    /// What comes next, for an error: `element "<x …"` or `text "…"`.
    pub fn describe_here(&self) -> String {
        let rest = self.rest();
        let cut: String = rest.chars().take(40).collect();
        let cut = cut.split('\n').next().unwrap_or_default();
        if rest.starts_with('<') {
            format!("element {cut:?}")
        } else {
            format!("text {cut:?}")
        }
    }

    /// Read `<name attr="v" …>` (or `/>`) where [`Self::starts_tag`] saw
    /// `name`; the attributes (values decoded) and whether the element
    /// closed itself.
    pub fn open_tag(&mut self, name: &str) -> Result<(Vec<(String, String)>, bool), String> {
        let after_name = self
            .rest()
            .get(1 + name.len()..)
            .ok_or_else(|| format!("<{name}> is cut short"))?;
        self.advance_to(after_name);
        let mut attributes: Vec<(String, String)> = Vec::new();
        loop {
            self.skip_space();
            let rest = self.rest();
            if let Some(after) = rest.strip_prefix("/>") {
                self.advance_to(after);
                return Ok((attributes, true));
            }
            if let Some(after) = rest.strip_prefix('>') {
                self.advance_to(after);
                return Ok((attributes, false));
            }
            let key_len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            let key = match rest.get(..key_len) {
                Some(key) if !key.is_empty() => key.to_string(),
                _ => return Err(format!("<{name}> has a malformed attribute list")),
            };
            let after_key = rest.get(key_len..).unwrap_or_default().trim_start();
            let Some(after_eq) = after_key.strip_prefix('=') else {
                return Err(format!("<{name}> attribute {key} has no value"));
            };
            let mut chars = after_eq.trim_start().chars();
            let quote = chars
                .next()
                .filter(|c| *c == '"' || *c == '\'')
                .ok_or_else(|| format!("<{name}> attribute {key} is not quoted"))?;
            let (raw_value, after) = chars
                .as_str()
                .split_once(quote)
                .ok_or_else(|| format!("<{name}> attribute {key} is never closed"))?;
            if attributes.iter().any(|(k, _)| *k == key) {
                return Err(format!("<{name}> has attribute {key} twice"));
            }
            attributes.push((key, unescape(raw_value)));
            self.advance_to(after);
        }
    }

    /// The raw text up to `</name>`, which is consumed.
    pub fn text_until_close(&mut self, name: &str) -> Result<&'a str, String> {
        let close = format!("</{name}>");
        let (inside, after) = self
            .rest()
            .split_once(&close)
            .ok_or_else(|| format!("<{name}> is never closed"))?;
        self.advance_to(after);
        Ok(inside)
    }
}

/// Decode `&lt; &gt; &amp; &quot; &apos;` and numeric references; anything
/// else that starts with `&` is text (`&amp;lt;` decodes to `&lt;`).
pub fn unescape(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((before, after_amp)) = rest.split_once('&') {
        out.push_str(before);
        // `(name, text after the ';')` of an entity of at most 10 bytes
        let entity = after_amp.split_once(';').filter(|(e, _)| e.len() <= 10);
        let decoded = entity.and_then(|(e, _)| match e {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => e
                .strip_prefix("#x")
                .or_else(|| e.strip_prefix("#X"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| e.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        });
        match (entity, decoded) {
            (Some((_, after_entity)), Some(c)) => {
                out.push(c);
                rest = after_entity;
            }
            _ => {
                out.push('&');
                rest = after_amp;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `text` with `&`, `<` and `>` escaped, for the XML of a prompt.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_attributes_and_text_in_order() {
        let mut c = Cursor::new(" <!-- c --> <a x=\"1 &amp; 2\" y='&#60;'>t &lt; u</a><b/>");
        c.skip_space_and_comments().unwrap();
        assert!(c.starts_tag("a") && !c.starts_tag("b"));
        let (attributes, closed) = c.open_tag("a").unwrap();
        assert!(!closed);
        assert_eq!(
            attributes,
            [("x".into(), "1 & 2".into()), ("y".into(), "<".into())]
        );
        assert_eq!(c.text_until_close("a").unwrap(), "t &lt; u");
        assert!(c.starts_tag("b"));
        assert_eq!(c.open_tag("b").unwrap(), (Vec::new(), true));
        assert!(c.at_end());
    }

    #[test]
    fn structural_faults_are_one_sentence() {
        let fault = |text: &str| {
            let mut c = Cursor::new(text);
            c.skip_space_and_comments()?;
            c.open_tag("a")?;
            c.text_until_close("a").map(|_| ())
        };
        assert_eq!(fault("<!-- open").unwrap_err(), "a comment is never closed");
        assert_eq!(
            fault("<a x=1>").unwrap_err(),
            "<a> attribute x is not quoted"
        );
        assert_eq!(fault("<a x>").unwrap_err(), "<a> attribute x has no value");
        assert_eq!(
            fault("<a x='1>").unwrap_err(),
            "<a> attribute x is never closed"
        );
        assert_eq!(
            fault("<a x='1' x='2'>").unwrap_err(),
            "<a> has attribute x twice"
        );
        assert_eq!(
            fault("<a !>").unwrap_err(),
            "<a> has a malformed attribute list"
        );
        assert_eq!(fault("<a>text").unwrap_err(), "<a> is never closed");
    }

    #[test]
    fn a_close_tag_is_consumed_only_when_it_comes_next() {
        let mut c = Cursor::new("</b></a>");
        assert!(!c.close_tag("a"));
        assert!(c.close_tag("b") && c.close_tag("a") && c.at_end());
    }

    #[test]
    fn entities_decode_once_and_unknown_ones_stay() {
        assert_eq!(
            unescape("&amp;lt; &#x41;&#66; &nbsp; &"),
            "&lt; AB &nbsp; &"
        );
        assert_eq!(escape("a<b>&c"), "a&lt;b&gt;&amp;c");
    }
}
