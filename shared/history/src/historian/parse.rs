//! Reading the model's answer: strict on structure, lenient on text.
//!
//! The answer must contain one `<history>` element, opened and closed; a
//! missing root or closing tag rejects the whole answer (a truncated answer
//! is never half-applied). Inside it only `<compartment>`, `<facts>` and
//! `<unprocessed_from>` may appear (and comments). Attributes are checked;
//! the text of `<title>`, `<p1>`…`<p4>` and `<fact>` runs to its own closing
//! tag, so it may hold `<`, `&` and code; the five XML entities are decoded.

use mc_base::xml::{Cursor, unescape};

use crate::store::CATEGORIES;

/// Episode types a compartment may have.
pub const EPISODES: [&str; 11] = [
    "feature",
    "bugfix",
    "debugging",
    "refactor",
    "investigation",
    "planning",
    "review",
    "testing",
    "docs",
    "ops",
    "discussion",
];

/// A compartment as the model wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct RawCompartment {
    pub start: i64,
    pub end: i64,
    pub importance: i64,
    pub episode: String,
    pub title: String,
    /// p1 (verbose) … p4 (one line).
    pub tiers: [String; 4],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFact {
    pub category: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub compartments: Vec<RawCompartment>,
    pub facts: Vec<RawFact>,
    pub unprocessed_from: i64,
}

/// Parse an answer; `Err` says what is wrong in one sentence (it goes into
/// the repair prompt and the failure record).
pub fn parse(text: &str) -> Result<Answer, String> {
    if text.trim().is_empty() {
        return Err("the answer is empty".into());
    }
    let Some(open) = text.find("<history>") else {
        return Err("the answer has no <history> root element".into());
    };
    let body_start = open + "<history>".len();
    let Some(body) = text
        .rfind("</history>")
        .and_then(|close| text.get(body_start..close))
    else {
        return Err("the answer is truncated: <history> is never closed".into());
    };
    let mut cursor = Cursor::new(body);
    let mut compartments = Vec::new();
    let mut facts = Vec::new();
    let mut facts_seen = false;
    let mut unprocessed_from = None;
    loop {
        cursor.skip_space_and_comments()?;
        if cursor.at_end() {
            break;
        }
        if cursor.starts_tag("compartment") {
            compartments.push(compartment(&mut cursor, compartments.len() + 1)?);
        } else if cursor.starts_tag("facts") {
            if facts_seen {
                return Err("<facts> appears twice".into());
            }
            facts_seen = true;
            facts = facts_of(&mut cursor)?;
        } else if cursor.starts_tag("unprocessed_from") {
            if unprocessed_from.is_some() {
                return Err("<unprocessed_from> appears twice".into());
            }
            let (_, self_closing) = cursor.open_tag("unprocessed_from")?;
            if self_closing {
                return Err("<unprocessed_from> is empty".into());
            }
            let value = cursor.text_until_close("unprocessed_from")?;
            unprocessed_from = Some(value.trim().parse::<i64>().map_err(|_| {
                format!(
                    "<unprocessed_from> holds {:?}, not an ordinal",
                    value.trim()
                )
            })?);
        } else {
            return Err(format!(
                "unexpected {} inside <history> (only <compartment>, <facts> and \
                 <unprocessed_from> belong there)",
                cursor.describe_here()
            ));
        }
    }
    let Some(unprocessed_from) = unprocessed_from else {
        return Err("<unprocessed_from> is missing".into());
    };
    Ok(Answer {
        compartments,
        facts,
        unprocessed_from,
    })
}

fn compartment(cursor: &mut Cursor, index: usize) -> Result<RawCompartment, String> {
    let (attributes, self_closing) = cursor.open_tag("compartment")?;
    let what = format!("compartment {index}");
    if self_closing {
        return Err(format!("{what} is empty"));
    }
    let mut start = None;
    let mut end = None;
    let mut importance = None;
    let mut episode = None;
    for (key, value) in attributes {
        let int = |v: &str| {
            v.trim()
                .parse::<i64>()
                .map_err(|_| format!("{what}: {key}=\"{v}\" is not an integer"))
        };
        match key.as_str() {
            "start" => start = Some(int(&value)?),
            "end" => end = Some(int(&value)?),
            "importance" => {
                let n = int(&value)?;
                if !(0..=100).contains(&n) {
                    return Err(format!("{what}: importance {n} is not within 0..100"));
                }
                importance = Some(n);
            }
            "episode" => {
                let e = value.trim().to_ascii_lowercase();
                if !EPISODES.contains(&e.as_str()) {
                    return Err(format!(
                        "{what}: episode {value:?} is not one of {}",
                        EPISODES.join(", ")
                    ));
                }
                episode = Some(e);
            }
            other => return Err(format!("{what}: unknown attribute {other}")),
        }
    }
    let missing = |name: &str| format!("{what} has no {name} attribute");
    let (start, end) = (
        start.ok_or_else(|| missing("start"))?,
        end.ok_or_else(|| missing("end"))?,
    );
    let what = format!("compartment {start}-{end}");
    let importance = importance.ok_or_else(|| format!("{what} has no importance attribute"))?;
    let episode = episode.ok_or_else(|| format!("{what} has no episode attribute"))?;
    const CHILDREN: [&str; 5] = ["title", "p1", "p2", "p3", "p4"];
    let mut texts: [Option<String>; 5] = Default::default();
    loop {
        cursor.skip_space_and_comments()?;
        if cursor.close_tag("compartment") {
            break;
        }
        if cursor.at_end() {
            return Err(format!("{what} is never closed"));
        }
        let Some((&name, slot)) = CHILDREN
            .iter()
            .zip(texts.iter_mut())
            .find(|(c, _)| cursor.starts_tag(c))
        else {
            return Err(format!(
                "unexpected {} in {what} (it holds <title>, <p1>, <p2>, <p3> and <p4>)",
                cursor.describe_here()
            ));
        };
        let (attributes, self_closing) = cursor.open_tag(name)?;
        if !attributes.is_empty() {
            return Err(format!("<{name}> in {what} takes no attributes"));
        }
        if slot.is_some() {
            return Err(format!("{what} has <{name}> twice"));
        }
        let raw = if self_closing {
            ""
        } else {
            cursor.text_until_close(name)?
        };
        let mut text = element_text(raw);
        if matches!(name, "title" | "p4") {
            text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        }
        if text.is_empty() {
            return Err(format!("{what} has an empty <{name}>"));
        }
        *slot = Some(text);
    }
    let [title, p1, p2, p3, p4] = texts;
    let need = |t: Option<String>, name: &str| t.ok_or_else(|| format!("{what} has no <{name}>"));
    Ok(RawCompartment {
        start,
        end,
        importance,
        episode,
        title: need(title, "title")?,
        tiers: [
            need(p1, "p1")?,
            need(p2, "p2")?,
            need(p3, "p3")?,
            need(p4, "p4")?,
        ],
    })
}

fn facts_of(cursor: &mut Cursor) -> Result<Vec<RawFact>, String> {
    let (attributes, self_closing) = cursor.open_tag("facts")?;
    if !attributes.is_empty() {
        return Err("<facts> takes no attributes".into());
    }
    let mut facts = Vec::new();
    if self_closing {
        return Ok(facts);
    }
    loop {
        cursor.skip_space_and_comments()?;
        if cursor.close_tag("facts") {
            return Ok(facts);
        }
        if cursor.at_end() {
            return Err("<facts> is never closed".into());
        }
        if !cursor.starts_tag("fact") {
            return Err(format!(
                "unexpected {} in <facts> (it holds <fact category=\"…\"> elements)",
                cursor.describe_here()
            ));
        }
        let (attributes, self_closing) = cursor.open_tag("fact")?;
        let mut category = None;
        for (key, value) in attributes {
            match key.as_str() {
                "category" => category = Some(value.trim().to_ascii_uppercase()),
                other => return Err(format!("<fact> has unknown attribute {other}")),
            }
        }
        let category = category.ok_or("a <fact> has no category attribute")?;
        if !CATEGORIES.contains(&category.as_str()) {
            return Err(format!(
                "fact category {category:?} is not one of {}",
                CATEGORIES.join(", ")
            ));
        }
        let raw = if self_closing {
            ""
        } else {
            cursor.text_until_close("fact")?
        };
        let content = element_text(raw)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if content.is_empty() {
            return Err(format!("a {category} fact is empty"));
        }
        facts.push(RawFact { category, content });
    }
}

/// An element's text: a CDATA wrapper removed, entities decoded, trimmed.
fn element_text(raw: &str) -> String {
    let trimmed = raw.trim();
    if let Some(inner) = trimmed
        .strip_prefix("<![CDATA[")
        .and_then(|r| r.strip_suffix("]]>"))
    {
        return inner.trim().to_string();
    }
    unescape(trimmed).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn compartment(start: i64, end: i64, title: &str) -> String {
        format!(
            "<compartment start=\"{start}\" end=\"{end}\" importance=\"60\" episode=\"feature\">\n\
             <title>{title}</title>\n<p1>long {title}</p1>\n<p2>medium</p2>\n<p3>short</p3>\n\
             <p4>line</p4>\n</compartment>\n"
        )
    }

    #[test]
    fn parses_the_documented_answer() {
        let text = "<history>\n<compartment start=\"12\" end=\"40\" importance=\"70\" episode=\"debugging\">\n\
            <title>Fix the flaky lock in the store tests</title>\n<p1>verbose paraphrase …</p1>\n\
            <p2>shorter …</p2>\n<p3>a few lines …</p3>\n<p4>one line</p4>\n</compartment>\n<facts>\n\
            <fact category=\"CONSTRAINTS\">Tests never touch the real home directory.</fact>\n</facts>\n\
            <unprocessed_from>41</unprocessed_from>\n</history>";
        let answer = parse(text).unwrap();
        assert_eq!(answer.unprocessed_from, 41);
        let c = &answer.compartments[0];
        assert_eq!((c.start, c.end, c.importance), (12, 40, 70));
        assert_eq!(c.episode, "debugging");
        assert_eq!(c.title, "Fix the flaky lock in the store tests");
        assert_eq!(c.tiers[3], "one line");
        assert_eq!(
            answer.facts,
            [RawFact {
                category: "CONSTRAINTS".into(),
                content: "Tests never touch the real home directory.".into()
            }]
        );
    }

    #[test]
    fn text_may_hold_code_and_entities() {
        let text = "Sure, here it is:\n```xml\n<history><compartment episode='refactor' importance=\"5\" end=\"3\" start=\"1\">\
            <p4>if a < b && c > d</p4><p3>x</p3><p2>Vec<String> &amp; &lt;T&gt; &#x41;&#66; &nbsp;</p2>\
            <p1><![CDATA[<raw> & stuff]]></p1><title>  Two\n words </title></compartment>\
            <!-- a note --><facts/><unprocessed_from> 4 </unprocessed_from></history>\n```";
        let answer = parse(text).unwrap();
        let c = &answer.compartments[0];
        assert_eq!(c.tiers[3], "if a < b && c > d");
        assert_eq!(c.tiers[1], "Vec<String> & <T> AB &nbsp;");
        assert_eq!(c.tiers[0], "<raw> & stuff");
        assert_eq!(c.title, "Two words");
        assert_eq!(answer.unprocessed_from, 4);
        assert!(answer.facts.is_empty());
    }

    #[test]
    fn structure_errors_reject_the_answer() {
        let ok_tail = "<unprocessed_from>3</unprocessed_from></history>";
        let cases: Vec<(String, &str)> = vec![
            ("".into(), "empty"),
            ("   \n".into(), "empty"),
            ("I could not do it.".into(), "no <history> root"),
            (format!("<history>{}", compartment(1, 2, "t")), "truncated"),
            (
                format!(
                    "<history>{}<unprocessed_from>3</unprocessed_from>",
                    compartment(1, 2, "t")
                ),
                "truncated",
            ),
            (
                format!("<history>{}", &compartment(1, 2, "t")[..60]),
                "truncated",
            ),
            (
                format!("<history>{}{}</history>", compartment(1, 2, "t"), ""),
                "<unprocessed_from> is missing",
            ),
            (format!("<history>stray words {ok_tail}"), "unexpected text"),
            (
                format!("<history><summary>x</summary>{ok_tail}"),
                "unexpected element",
            ),
            (
                format!(
                    "<history>{}{ok_tail}",
                    compartment(1, 2, "t").replace("<p3>short</p3>", "")
                ),
                "has no <p3>",
            ),
            (
                format!(
                    "<history>{}{ok_tail}",
                    compartment(1, 2, "t").replace("<p2>medium</p2>", "<p2> </p2>")
                ),
                "empty <p2>",
            ),
            (
                format!(
                    "<history>{}{ok_tail}",
                    compartment(1, 2, "t").replace("<p4>line</p4>", "<p4>a</p4><p4>b</p4>")
                ),
                "<p4> twice",
            ),
            (
                format!(
                    "<history>{}{ok_tail}",
                    compartment(1, 2, "t").replace("importance=\"60\"", "importance=\"high\"")
                ),
                "not an integer",
            ),
            (
                format!(
                    "<history>{}{ok_tail}",
                    compartment(1, 2, "t").replace("importance=\"60\"", "importance=\"160\"")
                ),
                "not within 0..100",
            ),
            (
                format!(
                    "<history>{}{ok_tail}",
                    compartment(1, 2, "t").replace(" importance=\"60\"", "")
                ),
                "no importance",
            ),
            (
                format!(
                    "<history>{}{ok_tail}",
                    compartment(1, 2, "t").replace("feature", "yak-shaving")
                ),
                "episode \"yak-shaving\"",
            ),
            (
                format!(
                    "<history>{}{ok_tail}",
                    compartment(1, 2, "t").replace("start=\"1\"", "start=\"1\" title=\"x\"")
                ),
                "unknown attribute title",
            ),
            (
                format!(
                    "<history>{}{ok_tail}",
                    compartment(1, 2, "t").replace("start=\"1\" ", "")
                ),
                "no start",
            ),
            (
                format!("<history><facts><fact category=\"WORKFLOW\">x</fact></facts>{ok_tail}"),
                "not one of",
            ),
            (
                format!("<history><facts><fact>x</fact></facts>{ok_tail}"),
                "no category",
            ),
            (
                format!("<history><facts><fact category=\"NAMING\">x</fact>{ok_tail}"),
                "in <facts>",
            ),
            (
                "<history><unprocessed_from>soon</unprocessed_from></history>".to_string(),
                "not an ordinal",
            ),
            (
                format!("<history>{ok_tail}<unprocessed_from>4</unprocessed_from></history>")
                    .replacen("</history>", "", 1),
                "twice",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(&text).expect_err(&text);
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn zero_compartments_parse_and_are_left_to_validation() {
        let answer = parse("<history><unprocessed_from>5</unprocessed_from></history>").unwrap();
        assert!(answer.compartments.is_empty());
    }

    #[test]
    fn unescape_leaves_unknown_entities() {
        assert_eq!(unescape("a &amp;&amp; b &foo; &#60;&"), "a && b &foo; <&");
    }
}
