//! Dates as Twilio writes them (RFC 2822 in UTC: `Tue, 31 Aug 2010 20:36:28 +0000`), for the
//! Call resource and the status callbacks' `Timestamp`. By hand: `httpdate` writes `GMT`
//! where Twilio writes `+0000`, and a calendar crate would be more than one function needs.

use std::time::{SystemTime, UNIX_EPOCH};

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `t` as `Tue, 31 Aug 2010 20:36:28 +0000` (times before 1970 are written as 1970).
pub fn rfc2822(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} +0000",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Year, month (1-12) and day (1-31) of the `days`th day after 1970-01-01: the proleptic
/// Gregorian calendar counted in 400-year eras of 146 097 days, years starting in March so
/// that the leap day falls last.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days from 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> String {
        rfc2822(UNIX_EPOCH + Duration::from_secs(secs))
    }

    #[test]
    fn known_dates() {
        assert_eq!(at(0), "Thu, 01 Jan 1970 00:00:00 +0000");
        // Twilio's own example of a Call's date_created.
        assert_eq!(at(1_283_286_988), "Tue, 31 Aug 2010 20:36:28 +0000");
        // A leap day and the day after.
        assert_eq!(at(951_782_400), "Tue, 29 Feb 2000 00:00:00 +0000");
        assert_eq!(at(951_868_799), "Tue, 29 Feb 2000 23:59:59 +0000");
        assert_eq!(at(951_868_800), "Wed, 01 Mar 2000 00:00:00 +0000");
        assert_eq!(at(4_102_444_800), "Fri, 01 Jan 2100 00:00:00 +0000");
        assert_eq!(
            rfc2822(UNIX_EPOCH - Duration::from_secs(5)),
            "Thu, 01 Jan 1970 00:00:00 +0000"
        );
    }
}
