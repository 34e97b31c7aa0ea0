//! Numbers as Redis reads and writes them: integers (`string2ll`), doubles (`strtod` without
//! blanks or NaN), and the two ways Redis prints a double (`%.17g` for scores, the shortest
//! exact text for INCRBYFLOAT and HINCRBYFLOAT).

/// Parses a signed integer with Redis's `string2ll` rules: optional `-`, digits, no `+`, no
/// leading zero, no blanks, within i64.
pub fn parse_integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    match digits {
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] if digits.len() <= 19 => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(byte - b'0'))?;
    }
    if negative { 0i64.checked_sub_unsigned(magnitude) } else { i64::try_from(magnitude).ok() }
}

/// Parses a double as Redis does (`strtod` over the whole text): no leading or trailing
/// blanks, not NaN; `inf`, `+inf`, `-inf` and exponents are accepted.
pub fn parse_double(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    if text.starts_with(|c: char| c.is_ascii_whitespace())
        || text.ends_with(|c: char| c.is_ascii_whitespace())
    {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    // Rust also reads "nan" and "infinity"; Redis's strtod reads the latter too.
    if unsigned.starts_with("nan") {
        return None;
    }
    let value: f64 = lower.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

/// `%.17g`: how Redis replies a score in RESP2 (ZSCORE, ZRANGE … WITHSCORES, ZINCRBY).
pub fn format_score(value: f64) -> String {
    if value.is_nan() {
        return "nan".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // The exponent after rounding to 17 significant digits decides the notation.
    let scientific = format!("{value:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').expect("an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    if !(-4..17).contains(&exponent) {
        let mantissa = strip_fraction_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let decimals = (16 - exponent) as usize;
    strip_fraction_zeros(&format!("{value:.decimals$}")).to_string()
}

fn strip_fraction_zeros(text: &str) -> &str {
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { text }
}

/// How INCRBYFLOAT and HINCRBYFLOAT store and reply their result: the shortest text that reads
/// back as the same double, never in exponent notation (Redis prints its long double with
/// `%.17Lf` and strips the zeros: the same text for every value a double holds exactly).
pub fn format_human(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    format!("{value}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_print_as_printf_g17() {
        for (value, text) in [
            (0.1, "0.10000000000000001"),
            (0.8456487467925616, "0.84564874679256163"),
            (1e300, "1.0000000000000001e+300"),
            (3.0, "3"),
            (-2.5, "-2.5"),
            (1e17, "1e+17"),
            (1e16, "10000000000000000"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (0.30000000000000004, "0.30000000000000004"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(format_score(value), text, "{value:e}");
        }
    }

    #[test]
    fn doubles_parse_as_redis_reads_them() {
        assert_eq!(parse_double(b"1.5"), Some(1.5));
        assert_eq!(parse_double(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_double(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_double(b"1e3"), Some(1000.0));
        for bad in [&b""[..], b" 1", b"1 ", b"nan", b"abc", b"1.5x", b"-nan"] {
            assert_eq!(parse_double(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(parse_integer(b"0"), Some(0));
        assert_eq!(parse_integer(b"-42"), Some(-42));
        assert_eq!(parse_integer(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_integer(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [&b""[..], b"-", b"-0", b"007", b"+1", b" 1", b"1.0", b"9223372036854775808"] {
            assert_eq!(parse_integer(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn human_doubles_have_no_exponent() {
        assert_eq!(format_human(10.5), "10.5");
        assert_eq!(format_human(3.0), "3");
        assert_eq!(format_human(1e20), "100000000000000000000");
        assert_eq!(format_human(-0.0), "0");
    }
}
