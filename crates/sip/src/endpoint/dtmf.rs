//! DTMF digits carried by SIP INFO (`application/dtmf-relay` and `application/dtmf`).

pub(super) fn is_dtmf_digit(c: char) -> bool {
    c.is_ascii_digit() || matches!(c, '*' | '#' | 'A'..='D' | '!')
}

/// Reads `Signal=5\r\nDuration=160` (application/dtmf-relay) or `5` (application/dtmf).
pub(super) fn parse_dtmf(content_type: &str, body: &[u8]) -> Option<(char, Option<u32>)> {
    let text = std::str::from_utf8(body).ok()?;
    if content_type == "application/dtmf" {
        let c = text.trim().chars().next()?.to_ascii_uppercase();
        return is_dtmf_digit(c).then_some((c, None));
    }
    let mut digit = None;
    let mut duration = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        match k.trim().to_ascii_lowercase().as_str() {
            "signal" => {
                let v = v.trim();
                digit = match v {
                    "10" => Some('*'),
                    "11" => Some('#'),
                    "16" => Some('!'),
                    _ if v.len() == 1 => v.chars().next().map(|c| c.to_ascii_uppercase()),
                    _ => None,
                };
            }
            "duration" => duration = v.trim().parse().ok(),
            _ => {}
        }
    }
    digit.filter(|c| is_dtmf_digit(*c)).map(|d| (d, duration))
}
