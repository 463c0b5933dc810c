//! Reading a dreamer task's answer: one XML manifest, strict on structure,
//! lenient on text (the same stance as the historian's parser).
//!
//! The answer must hold exactly one `<ROOT>` element, opened and closed (a
//! truncated answer has no closing tag and is rejected whole); prose or a
//! code fence around it is ignored. Inside it only the task's child
//! elements and comments may appear. A child is `<name a="1" b="x"/>` or
//! `<name …>text</name>`; its text runs to its own closing tag, so it may
//! hold `<`, `&` and code; entities are decoded (`mc_base::xml`). What each
//! task accepts (which attributes, which ids) is checked by the task.

use std::collections::BTreeMap;

pub use mc_base::xml::escape;
use mc_base::xml::{Cursor, unescape};

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
    let mut cursor = Cursor::new(body);
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
        out.push(element(&mut cursor, name)?);
    }
}

/// The child element `name` that `cursor` is at: its attributes and, unless
/// it closed itself, its text (entities decoded, not trimmed).
fn element(cursor: &mut Cursor, name: &str) -> Result<Element, String> {
    let (attributes, self_closing) = cursor.open_tag(name)?;
    let text = if self_closing {
        None
    } else {
        Some(unescape(cursor.text_until_close(name)?))
    };
    Ok(Element {
        name: name.to_string(),
        attributes,
        text,
    })
}

/// One verdict per memory sent, by id: each element may carry only
/// `attributes`, names one memory (`id`) that was sent and not answered
/// before, and `verdict` reads the rest of it; every memory sent must be
/// answered. The rule classify, verify and archive-stale share.
pub fn per_memory<V>(
    elements: Vec<Element>,
    sent: &[i64],
    attributes: &[&str],
    mut verdict: impl FnMut(i64, &Element) -> Result<V, String>,
) -> Result<BTreeMap<i64, V>, String> {
    let mut verdicts = BTreeMap::new();
    for el in elements {
        el.only(attributes)?;
        let id = single_id(el.required("id")?)?;
        if !sent.contains(&id) {
            return Err(format!("memory #{id} was not sent"));
        }
        let answer = verdict(id, &el)?;
        if verdicts.insert(id, answer).is_some() {
            return Err(format!("memory #{id} is answered twice"));
        }
    }
    if let Some(missing) = sent.iter().find(|id| !verdicts.contains_key(id)) {
        return Err(format!("memory #{missing} was not answered"));
    }
    Ok(verdicts)
}

/// `"12"` or `"#12"`.
pub fn single_id(text: &str) -> Result<i64, String> {
    match ids(text)?.as_slice() {
        [id] => Ok(*id),
        _ => Err(format!("id {text:?} names more than one memory")),
    }
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
        assert_eq!(unescape("&amp;lt;"), "&lt;");
    }
}
