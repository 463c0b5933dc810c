//! Reading a dreamer task's answer: one XML manifest, strict on structure,
//! lenient on text (the same stance as the historian's parser).
//!
//! The answer must hold exactly one `<ROOT>` element, opened and closed (a
//! truncated answer has no closing tag and is rejected whole); prose or a
//! code fence around it is ignored. Inside it only the task's child
//! elements and comments may appear. A child is `<name a="1" b="x"/>` or
//! `<name …>text</name>`; its text runs to its own closing tag, so it may
//! hold `<`, `&` and code; the five XML entities are decoded. What each
//! task accepts (which attributes, which ids) is checked by the task.

/// One child element of the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub name: String,
    pub attributes: Vec<(String, String)>,
    /// `None` for a self-closing element.
    pub text: Option<String>,
}

impl Element {
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The attribute, or an error naming the element.
    pub fn required(&self, name: &str) -> Result<&str, String> {
        self.attribute(name)
            .ok_or_else(|| format!("<{}> has no {name} attribute", self.name))
    }

    /// An error if the element has an attribute outside `allowed`.
    pub fn only(&self, allowed: &[&str]) -> Result<(), String> {
        match self
            .attributes
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            Some((k, _)) => Err(format!("<{}> has an unknown attribute {k}", self.name)),
            None => Ok(()),
        }
    }

    /// The trimmed text, or an error when there is none.
    pub fn text(&self) -> Result<&str, String> {
        match self.text.as_deref().map(str::trim) {
            Some(t) if !t.is_empty() => Ok(t),
            _ => Err(format!("<{}> has no text", self.name)),
        }
    }
}

/// The children of the one `<root>` element of `answer`, each named in
/// `children`. `Err` says what is wrong, in one sentence.
pub fn parse(answer: &str, root: &str, children: &[&str]) -> Result<Vec<Element>, String> {
    if answer.trim().is_empty() {
        return Err("the answer is empty".into());
    }
    let open = format!("<{root}>");
    let close = format!("</{root}>");
    let Some(start) = answer.find(&open) else {
        // `<root/>`: an empty manifest.
        if answer.contains(&format!("<{root}/>")) {
            return Ok(Vec::new());
        }
        return Err(format!("the answer has no <{root}> element"));
    };
    let body_start = start + open.len();
    let Some(end) = answer.rfind(&close).filter(|&end| end >= body_start) else {
        return Err(format!("the answer is truncated: <{root}> is never closed"));
    };
    let body = answer.get(body_start..end).unwrap_or_default();
    if body.contains(&open)
        || answer
            .get(end + close.len()..)
            .unwrap_or_default()
            .contains(&open)
    {
        return Err(format!("the answer has more than one <{root}> element"));
    }
    let mut cursor = Cursor { text: body, pos: 0 };
    let mut out = Vec::new();
    loop {
        cursor.skip_space_and_comments()?;
        if cursor.at_end() {
            return Ok(out);
        }
        let Some(name) = children.iter().find(|c| cursor.starts_tag(c)) else {
            return Err(format!(
                "unexpected {} inside <{root}> (only {} belong there)",
                cursor.describe_here(),
                children
                    .iter()
                    .map(|c| format!("<{c}>"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        out.push(cursor.element(name)?);
    }
}

struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or_default()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    fn advance_to(&mut self, rest: &str) {
        self.pos = self.text.len() - rest.len();
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.advance_to(rest.trim_start());
    }

    fn skip_space_and_comments(&mut self) -> Result<(), String> {
        loop {
            self.skip_space();
            match self.rest().strip_prefix("<!--") {
                Some(comment) => {
                    let end = comment.find("-->").ok_or("a comment is never closed")?;
                    let after = comment.get(end + 3..).unwrap_or_default();
                    self.advance_to(after);
                }
                None => return Ok(()),
            }
        }
    }

    fn starts_tag(&self, name: &str) -> bool {
        self.rest()
            .strip_prefix('<')
            .and_then(|r| r.strip_prefix(name))
            .and_then(|r| r.chars().next())
            .is_some_and(|c| c.is_whitespace() || c == '>' || c == '/')
    }

    fn describe_here(&self) -> String {
        let cut: String = self.rest().chars().take(40).collect();
        let cut = cut.lines().next().unwrap_or_default().to_string();
        if cut.starts_with('<') {
            format!("element {cut:?}")
        } else {
            format!("text {cut:?}")
        }
    }

    fn element(&mut self, name: &str) -> Result<Element, String> {
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
                return Ok(Element {
                    name: name.to_string(),
                    attributes,
                    text: None,
                });
            }
            if let Some(after) = rest.strip_prefix('>') {
                let close = format!("</{name}>");
                let end = after
                    .find(&close)
                    .ok_or_else(|| format!("<{name}> is never closed"))?;
                let text = decode(after.get(..end).unwrap_or_default());
                self.advance_to(after.get(end + close.len()..).unwrap_or_default());
                return Ok(Element {
                    name: name.to_string(),
                    attributes,
                    text: Some(text),
                });
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
            let after_eq = after_eq.trim_start();
            let quote = after_eq
                .chars()
                .next()
                .filter(|c| *c == '"' || *c == '\'')
                .ok_or_else(|| format!("<{name}> attribute {key} is not quoted"))?;
            let inner = after_eq.get(1..).unwrap_or_default();
            let value_end = inner
                .find(quote)
                .ok_or_else(|| format!("<{name}> attribute {key} is never closed"))?;
            if attributes.iter().any(|(k, _)| *k == key) {
                return Err(format!("<{name}> has attribute {key} twice"));
            }
            attributes.push((key, decode(inner.get(..value_end).unwrap_or_default())));
            self.advance_to(inner.get(value_end + 1..).unwrap_or_default());
        }
    }
}

/// The five XML entities, decoded (`&amp;` last, so `&amp;lt;` stays `&lt;`).
fn decode(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// `text` with `&`, `<` and `>` escaped, for the prompts' XML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A list of ids: `12,40` or `12 40`. Every element must be an integer.
pub fn ids(value: &str) -> Result<Vec<i64>, String> {
    let ids: Vec<&str> = value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .collect();
    if ids.is_empty() {
        return Err("an empty id list".into());
    }
    ids.iter()
        .map(|s| {
            s.trim_start_matches('#')
                .parse::<i64>()
                .map_err(|_| format!("{s:?} is not a memory id"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHILDREN: &[&str] = &["memory"];

    #[test]
    fn children_with_attributes_and_lenient_text() {
        let answer = "Sure, here it is:\n```xml\n<verify>\n<!-- one -->\n\
            <memory id=\"3\" verdict=\"verified\"/>\n\
            <memory id='4' verdict=\"update\">Use `a < b && c` in x.rs</memory>\n\
            </verify>\n```";
        let els = parse(answer, "verify", CHILDREN).unwrap();
        assert_eq!(els.len(), 2);
        assert_eq!(els[0].attribute("id"), Some("3"));
        assert_eq!(els[0].text, None);
        assert_eq!(els[1].text().unwrap(), "Use `a < b && c` in x.rs");
        assert_eq!(
            parse("<verify/>", "verify", CHILDREN).unwrap(),
            Vec::<Element>::new()
        );
        assert_eq!(
            parse("<verify>&lt;x&gt;</verify>", "verify", CHILDREN).unwrap_err(),
            "unexpected text \"&lt;x&gt;\" inside <verify> (only <memory> belong there)"
        );
    }

    #[test]
    fn structural_faults_reject_the_whole_answer() {
        let cases = [
            ("", "the answer is empty"),
            ("no xml at all", "the answer has no <verify> element"),
            (
                "<verify><memory id=\"3\" verdict=\"verified\"/>",
                "the answer is truncated: <verify> is never closed",
            ),
            (
                "<verify><memory id=\"3\">text</verify>",
                "<memory> is never closed",
            ),
            (
                "<verify><fact>x</fact></verify>",
                "unexpected element \"<fact>x</fact>\" inside <verify> (only <memory> belong there)",
            ),
            (
                "<verify><memory id=3/></verify>",
                "<memory> attribute id is not quoted",
            ),
            (
                "<verify><memory id=\"1\" id=\"2\"/></verify>",
                "<memory> has attribute id twice",
            ),
            (
                "<verify></verify><verify></verify>",
                "the answer has more than one <verify> element",
            ),
            ("<verify><!-- x </verify>", "a comment is never closed"),
        ];
        for (answer, problem) in cases {
            assert_eq!(
                parse(answer, "verify", CHILDREN).unwrap_err(),
                problem,
                "{answer}"
            );
        }
    }

    #[test]
    fn id_lists() {
        assert_eq!(ids("12,40").unwrap(), [12, 40]);
        assert_eq!(ids(" #3  7 ").unwrap(), [3, 7]);
        assert!(ids("3,x").is_err());
        assert!(ids(" ").is_err());
        assert_eq!(escape("a<b&c>"), "a&lt;b&amp;c&gt;");
        assert_eq!(decode("&amp;lt;"), "&lt;");
    }
}
