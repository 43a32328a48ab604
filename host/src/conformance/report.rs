//! The kit's report: one row per check, printed as a table, JSON or JUnit.

use std::borrow::Cow;
use std::time::Duration;

use serde::Serialize;

use crate::escape::{Escaped, escape};

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

    /// A table for people: case, expected, got, pass/fail, time; then the
    /// details of each failure. What the module said (its `describe()`
    /// name, outcomes, failure details) is escaped; JSON and JUnit escape
    /// it by their own rules.
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
        if failed > 0 {
            text.push('\n');
        }
        text.push_str(&format!(
            "\n{} passed, {} failed\n",
            self.results.len() - failed,
            failed
        ));
        text
    }

    /// The report as JUnit XML, one test suite per kit suite.
    pub fn to_junit(&self) -> String {
        use quick_junit::{NonSuccessKind, Report as Junit, TestCase, TestCaseStatus, TestSuite};
        let mut junit = Junit::new(format!("gatehouse conformance of {}", self.module));
        let mut suites: Vec<TestSuite> = Vec::new();
        for result in &self.results {
            if suites
                .last()
                .is_none_or(|suite| suite.name.as_str() != result.suite)
            {
                suites.push(TestSuite::new(result.suite.clone()));
            }
            let status = if result.passed {
                TestCaseStatus::success()
            } else {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status.set_message(format!("expected {}, got {}", result.expected, result.got));
                if let Some(detail) = &result.detail {
                    status.set_description(detail.clone());
                }
                status
            };
            let mut case = TestCase::new(result.case.clone(), status);
            case.set_classname(result.suite.clone())
                .set_time(result.time);
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
}
