//! The kit's report: one row per check, printed as a table, JSON or JUnit.

use std::borrow::Cow;
use std::time::Duration;

use serde::Serialize;

use gatehouse_core::escape::{Escaped, escape};

/// One check.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// `contract`, `guardian` or `cases`.
    pub suite: String,
    /// What was checked.
    pub case: String,
    /// What should come out.
    pub expected: String,
    /// What came out.
    pub got: String,
    /// Whether it held.
    pub passed: bool,
    /// Why it did not hold, or more about what came out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// How long it took, in microseconds.
    #[serde(serialize_with = "micros")]
    pub time: Duration,
}

fn micros<S: serde::Serializer>(time: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(time.as_micros()).unwrap_or(u64::MAX))
}

/// Everything a kit run checked.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The module's source.
    pub module: String,
    /// Its sha256, when it could be read.
    pub digest: Option<String>,
    /// The checks, in order.
    pub results: Vec<CaseResult>,
}

impl Report {
    pub(crate) fn new(module: &str) -> Report {
        Report {
            module: module.to_owned(),
            digest: None,
            results: Vec::new(),
        }
    }

    pub(crate) fn push(
        &mut self,
        suite: &str,
        case: &str,
        (expected, got): (&str, &str),
        passed: bool,
        detail: Option<String>,
        time: Duration,
    ) {
        self.results.push(CaseResult {
            suite: suite.to_owned(),
            case: case.to_owned(),
            expected: expected.to_owned(),
            got: got.to_owned(),
            passed,
            detail,
            time,
        });
    }

    /// Whether every check held (and there was at least one).
    pub fn passed(&self) -> bool {
        !self.results.is_empty() && self.results.iter().all(|result| result.passed)
    }

    /// The checks that did not hold.
    pub fn failures(&self) -> impl Iterator<Item = &CaseResult> {
        self.results.iter().filter(|result| !result.passed)
    }

    /// The failed checks on one line, `case: detail; …` (the detail, or
    /// what the module gave when there is none), as a refusal quotes them.
    /// The module's words are not escaped here: escape the line where it is
    /// printed.
    pub fn failures_line(&self) -> String {
        self.failures()
            .map(|row| {
                format!(
                    "{}: {}",
                    row.case,
                    row.detail.as_deref().unwrap_or(&row.got)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// A table for people: case, expected, got, pass/fail, time; then the
    /// details of each failure. What the module said (its `describe()`
    /// name, outcomes, failure details) is escaped; the JSON report
    /// ([`gatehouse_core::escape::to_json_string_pretty`]) and [`Report::to_junit`]
    /// escape it too, each in its own syntax.
    pub fn to_text(&self) -> String {
        let rows: Vec<[Cow<'_, str>; 4]> = self
            .results
            .iter()
            .map(|result| {
                [
                    escape(&result.case),
                    escape(&result.expected),
                    escape(&result.got),
                    escape(result.detail.as_deref().unwrap_or("no detail")),
                ]
            })
            .collect();
        let width = |column: usize, floor: usize| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
                .clamp(floor, 60)
        };
        let case_width = width(0, 4);
        let expected_width = width(1, 8);
        let got_width = width(2, 3);
        let mut text = format!("conformance of {}\n", Escaped(&self.module));
        if let Some(digest) = &self.digest {
            text.push_str(&format!("sha256 {}\n", Escaped(digest)));
        }
        text.push_str(&format!(
            "{:<9} {:<case_width$} {:<expected_width$} {:<got_width$} {:<4} {:>10}\n",
            "suite", "case", "expected", "got", "", "time"
        ));
        for (result, [case, expected, got, _]) in self.results.iter().zip(&rows) {
            text.push_str(&format!(
                "{:<9} {:<case_width$} {:<expected_width$} {:<got_width$} {:<4} {:>7.3} ms\n",
                Escaped(&result.suite),
                clip(case, case_width),
                clip(expected, expected_width),
                clip(got, got_width),
                if result.passed { "pass" } else { "FAIL" },
                result.time.as_secs_f64() * 1000.0,
            ));
        }
        let mut failed = 0;
        for (result, [case, _, _, detail]) in self.results.iter().zip(&rows) {
            if !result.passed {
                failed += 1;
                text.push_str(&format!(
                    "\nFAIL {} / {case}: {detail}",
                    Escaped(&result.suite)
                ));
            }
        }
        // What a passing check noticed (the environment reads it answered
        // empty, say) is worth a line too.
        for (result, [case, _, _, detail]) in self.results.iter().zip(&rows) {
            if result.passed && result.detail.is_some() {
                text.push_str(&format!(
                    "\nnote {} / {case}: {detail}",
                    Escaped(&result.suite)
                ));
            }
        }
        if self.results.iter().any(|result| result.detail.is_some()) {
            text.push('\n');
        }
        text.push_str(&format!(
            "\n{} passed, {} failed\n",
            self.results.len() - failed,
            failed
        ));
        text
    }

    /// The report as JUnit XML, one test suite per kit suite. Every string
    /// is escaped as for a terminal ([`escape`]: `\u{1b}` for ESC, and so
    /// on) before it goes into the XML, so what the module said is shown, not
    /// dropped (quick-junit would strip ANSI sequences and C0 controls) and
    /// not passed on raw (DEL, C1, bidi controls, which quick-junit keeps).
    pub fn to_junit(&self) -> String {
        use quick_junit::{NonSuccessKind, Report as Junit, TestCase, TestCaseStatus, TestSuite};
        let mut junit = Junit::new(xml_text(&format!(
            "gatehouse conformance of {}",
            self.module
        )));
        let mut suites: Vec<TestSuite> = Vec::new();
        for result in &self.results {
            let suite_name = xml_text(&result.suite);
            if suites
                .last()
                .is_none_or(|suite| suite.name.as_str() != suite_name)
            {
                suites.push(TestSuite::new(suite_name.clone()));
            }
            let status = if result.passed {
                TestCaseStatus::success()
            } else {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status.set_message(xml_text(&format!(
                    "expected {}, got {}",
                    result.expected, result.got
                )));
                if let Some(detail) = &result.detail {
                    status.set_description(xml_text(detail));
                }
                status
            };
            let mut case = TestCase::new(xml_text(&result.case), status);
            case.set_classname(suite_name).set_time(result.time);
            if let Some(suite) = suites.last_mut() {
                suite.add_test_case(case);
            }
        }
        junit.add_test_suites(suites);
        junit
            .to_string()
            .unwrap_or_else(|error| format!("<!-- cannot write JUnit XML: {error} -->"))
    }
}

/// `text` as it goes into JUnit XML: [`escape`]d, which leaves none of the
/// control characters XML 1.0 cannot carry, and U+FFFE and U+FFFF (which it
/// cannot carry either) escaped the same way.
fn xml_text(text: &str) -> String {
    let escaped = escape(text);
    if escaped.contains(['\u{fffe}', '\u{ffff}']) {
        escaped
            .replace('\u{fffe}', "\\u{fffe}")
            .replace('\u{ffff}', "\\u{ffff}")
    } else {
        escaped.into_owned()
    }
}

fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let mut clipped: String = text.chars().take(width.saturating_sub(1)).collect();
        clipped.push('…');
        clipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_report_escapes_what_the_module_said() {
        let hostile = "x\u{1b}]0;pwned\u{7}\r\nFORGED 1 passed, 0 failed\u{9b}2J\u{202e}";
        let mut report = Report::new("m.wasm");
        report.push(
            "contract",
            "describe",
            ("a name", &format!("{hostile} 0.1")),
            true,
            None,
            Duration::ZERO,
        );
        report.push(
            "contract",
            hostile,
            ("decline", "accept"),
            false,
            Some(hostile.to_owned()),
            Duration::ZERO,
        );
        let text = report.to_text();
        for raw in ['\u{1b}', '\r', '\u{7}', '\u{9b}', '\u{202e}'] {
            assert!(!text.contains(raw), "raw {raw:?} in {text}");
        }
        assert!(
            text.lines().all(|line| !line.starts_with("FORGED")),
            "{text}"
        );
        assert!(text.contains(r"\u{1b}]0;pwned\u{7}\r\nFORGED"), "{text}");
        assert!(text.ends_with("\n1 passed, 1 failed\n"), "{text}");
    }

    /// A report whose every string carries what `needs_escape` names (and
    /// the two characters XML cannot carry).
    fn hostile_report() -> (Report, &'static str) {
        let hostile = "x\u{1b}]0;pwned\u{7}\r\nFORGED\u{7f}\u{9b}2J\u{202e}detpecca\u{2028}\u{200b}\u{e0041}\u{fffe}<&>\"'";
        let mut report = Report::new(hostile);
        report.push(
            hostile,
            hostile,
            (hostile, hostile),
            false,
            Some(hostile.to_owned()),
            Duration::ZERO,
        );
        report.push(
            "contract",
            "describe",
            ("a", "a"),
            true,
            None,
            Duration::ZERO,
        );
        (report, hostile)
    }

    #[test]
    fn the_junit_report_escapes_what_the_module_said_and_stays_valid_xml() {
        let (report, _) = hostile_report();
        let xml = report.to_junit();
        for raw in [
            '\u{1b}',
            '\r',
            '\u{7}',
            '\u{7f}',
            '\u{9b}',
            '\u{202e}',
            '\u{2028}',
            '\u{200b}',
            '\u{e0041}',
            '\u{fffe}',
        ] {
            assert!(!xml.contains(raw), "raw {raw:?} in {xml}");
        }
        // Shown, not dropped: quick-junit alone strips the ANSI sequence.
        let shown = r"x\u{1b}]0;pwned\u{7}\r\nFORGED\u{7f}\u{9b}2J\u{202e}detpecca\u{2028}\u{200b}\u{e0041}\u{fffe}";
        assert!(xml.contains(shown), "{xml}");
        let parsed = quick_junit::Report::deserialize_from_str(&xml).expect("valid JUnit XML");
        let suite = &parsed.test_suites[0];
        assert!(suite.name.as_str().starts_with(shown), "{:?}", suite.name);
        assert!(
            suite.test_cases[0].name.as_str().ends_with("<&>\"'"),
            "{:?}",
            suite.test_cases[0].name
        );
        assert_eq!(parsed.test_suites.len(), 2);
    }

    #[test]
    fn the_json_report_escapes_what_the_module_said_and_means_the_same() {
        let (report, hostile) = hostile_report();
        let json = gatehouse_core::escape::to_json_string_pretty(&report).expect("JSON");
        assert!(
            !json
                .chars()
                .any(|c| gatehouse_core::escape::needs_escape(c) && c != '\n'),
            "{json:?}"
        );
        assert!(json.contains(r"x\u001b]0;pwned\u0007\r\nFORGED\u007f\u009b2J\u202edetpecca\u2028\u200b\udb40\udc41"), "{json}");
        let parsed: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert_eq!(parsed["module"], hostile);
        assert_eq!(parsed["results"][0]["detail"], hostile);
    }
}
