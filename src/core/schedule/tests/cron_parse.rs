//! Parsing cron expressions: every accepted form and every refusal, with its message.

use crate::core::schedule::{CronError, CronExpr, CronField};

/// The values of a bit set, ascending.
fn values(set: u64) -> Vec<u32> {
    (0..64).filter(|bit| set & (1 << bit) != 0).collect()
}

fn parse(expression: &str) -> CronExpr {
    CronExpr::parse(expression).expect("a valid expression")
}

fn problem(expression: &str) -> (CronField, String) {
    match CronExpr::parse(expression) {
        Err(CronError::Field { field, problem, .. }) => (field, problem),
        other => panic!("{expression:?}: expected a field error, got {other:?}"),
    }
}

#[test]
fn stars_lists_ranges_and_steps() {
    let expr = parse("*/15 0,12 1-10/3 * *");
    assert_eq!(values(expr.minutes), [0, 15, 30, 45]);
    assert_eq!(values(expr.hours.into()), [0, 12]);
    assert_eq!(values(expr.days_of_month.into()), [1, 4, 7, 10]);
    assert_eq!(values(expr.months.into()), (1..=12).collect::<Vec<_>>());
    assert_eq!(
        values(expr.days_of_week.into()),
        (0..=6).collect::<Vec<_>>()
    );
    let expr = parse("1-10/2 5-7,22 * * *");
    assert_eq!(values(expr.minutes), [1, 3, 5, 7, 9]);
    assert_eq!(values(expr.hours.into()), [5, 6, 7, 22]);
    assert_eq!(values(parse("59 23 31 12 6").minutes), [59]);
}

#[test]
fn month_and_weekday_names_in_any_case_and_in_ranges() {
    let expr = parse("0 9 * JAN-mar,Dec Mon-FRI");
    assert_eq!(values(expr.months.into()), [1, 2, 3, 12]);
    assert_eq!(values(expr.days_of_week.into()), [1, 2, 3, 4, 5]);
    assert_eq!(values(parse("0 0 * * sun,sat").days_of_week.into()), [0, 6]);
}

#[test]
fn day_of_week_seven_is_sunday() {
    assert_eq!(values(parse("0 0 * * 7").days_of_week.into()), [0]);
    assert_eq!(values(parse("0 0 * * 5-7").days_of_week.into()), [0, 5, 6]);
    assert_eq!(
        parse("0 0 * * 0").days_of_week,
        parse("0 0 * * 7").days_of_week
    );
}

#[test]
fn day_fields_combine_with_or_only_when_neither_begins_with_a_star() {
    assert!(!parse("0 9 1 * mon").day_and);
    assert!(parse("0 9 * * mon").day_and);
    assert!(parse("0 9 1 * *").day_and);
    // As in Vixie cron: a stepped star still counts as a star.
    assert!(parse("0 9 */2 * mon").day_and);
}

#[test]
fn whitespace_between_fields_is_normalized() {
    let expr = parse("  0\t9   * *  1-5 ");
    assert_eq!(expr.as_str(), "0 9 * * 1-5");
    assert_eq!(expr.to_string(), "0 9 * * 1-5");
}

#[test]
fn a_wrong_number_of_fields_is_refused() {
    for (expression, found) in [("", 0), ("* * * *", 4), ("0 0 * * * 2026", 6)] {
        let error = CronExpr::parse(expression).unwrap_err();
        assert_eq!(
            error,
            CronError::FieldCount {
                expression: expression.to_owned(),
                found
            }
        );
        assert!(error.to_string().contains("5 fields"), "{error}");
    }
}

#[test]
fn each_bad_field_names_the_field_and_the_problem() {
    let cases = [
        ("60 * * * *", CronField::Minute, "60 is out of range (0-59)"),
        ("* 24 * * *", CronField::Hour, "out of range (0-23)"),
        ("* * 0 * *", CronField::DayOfMonth, "out of range (1-31)"),
        ("* * * 13 *", CronField::Month, "out of range (1-12)"),
        ("* * * * 8", CronField::DayOfWeek, "out of range (0-7)"),
        ("1,,2 * * * *", CronField::Minute, "empty item"),
        ("5, * * * *", CronField::Minute, "empty item"),
        ("* 10-2 * * *", CronField::Hour, "starts after it ends"),
        ("*/0 * * * *", CronField::Minute, "a step of 0"),
        (
            "*/x * * * *",
            CronField::Minute,
            "not a positive whole number",
        ),
        (
            "*/+5 * * * *",
            CronField::Minute,
            "not a positive whole number",
        ),
        ("5/15 * * * *", CronField::Minute, "write 5-59/15 or */15"),
        ("* * * foo *", CronField::Month, "nor one of jan"),
        ("* * * * monday", CronField::DayOfWeek, "nor one of sun"),
        ("x * * * *", CronField::Minute, "not a number from 0 to 59"),
        ("-1 * * * *", CronField::Minute, "not a number"),
        ("? * * * *", CronField::Minute, "not a number"),
        ("* * L * *", CronField::DayOfMonth, "not a number"),
    ];
    for (expression, field, expected) in cases {
        let (got_field, got) = problem(expression);
        assert_eq!(got_field, field, "{expression}");
        assert!(got.contains(expected), "{expression}: {got}");
    }
    let text = CronExpr::parse("* * * 13 *").unwrap_err().to_string();
    assert_eq!(text, r#"cron month field "13": 13 is out of range (1-12)"#);
}

#[test]
fn an_expression_that_can_never_fire_is_refused() {
    for expression in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 30-31 feb */2"] {
        let error = CronExpr::parse(expression).unwrap_err();
        assert!(
            matches!(error, CronError::NeverFires { .. }),
            "{expression}"
        );
        assert!(error.to_string().contains("never fires"), "{error}");
    }
    // February 29 comes every four years; under the OR rule any Monday fires.
    parse("0 0 29 2 *");
    parse("0 0 31 2 mon");
    parse("0 0 31 2,3 *");
}

#[test]
fn outside_text_of_any_unicode_is_refused_without_panicking() {
    for expression in ["\0 * * * *", "٣ * * * *", "* * * * \u{FFFD}", "１ * * * *"] {
        assert!(CronExpr::parse(expression).is_err(), "{expression:?}");
    }
}
