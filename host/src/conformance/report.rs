//! The kit's report: one row per check, printed as a table, JSON or JUnit.

use std::time::Duration;

use serde::Serialize;

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
    /// details of each failure.
    pub fn to_text(&self) -> String {
        let width = |pick: fn(&CaseResult) -> &str, floor: usize| {
            self.results
                .iter()
                .map(|result| pick(result).chars().count())
                .max()
                .unwrap_or(0)
                .clamp(floor, 60)
        };
        let case_width = width(|result| &result.case, 4);
        let expected_width = width(|result| &result.expected, 8);
        let got_width = width(|result| &result.got, 3);
        let mut text = format!("conformance of {}\n", self.module);
        if let Some(digest) = &self.digest {
            text.push_str(&format!("sha256 {digest}\n"));
        }
        text.push_str(&format!(
            "{:<9} {:<case_width$} {:<expected_width$} {:<got_width$} {:<4} {:>10}\n",
            "suite", "case", "expected", "got", "", "time"
        ));
        for result in &self.results {
            text.push_str(&format!(
                "{:<9} {:<case_width$} {:<expected_width$} {:<got_width$} {:<4} {:>7.3} ms\n",
                result.suite,
                clip(&result.case, case_width),
                clip(&result.expected, expected_width),
                clip(&result.got, got_width),
                if result.passed { "pass" } else { "FAIL" },
                result.time.as_secs_f64() * 1000.0,
            ));
        }
        let failed: Vec<&CaseResult> = self.failures().collect();
        for result in &failed {
            text.push_str(&format!(
                "\nFAIL {} / {}: {}",
                result.suite,
                result.case,
                result.detail.as_deref().unwrap_or("no detail")
            ));
        }
        if !failed.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!(
            "\n{} passed, {} failed\n",
            self.results.len() - failed.len(),
            failed.len()
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
