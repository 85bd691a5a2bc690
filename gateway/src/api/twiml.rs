//! The TwiML verbs ontime runs, and their parser.

use std::time::Duration;

/// Where `<Dial>` / `<Refer>` sends the caller (a blind transfer by SIP REFER).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialTarget {
    /// `<Sip>sip:...</Sip>`: a SIP URI, as written.
    Sip(String),
    /// `<Number>+1...</Number>` or bare text in `<Dial>`: an E.164 number.
    Number(String),
}

/// One TwiML verb.
#[derive(Debug, Clone, PartialEq)]
pub enum Verb {
    /// `<Hangup/>`.
    Hangup,
    /// `<Pause length="N"/>` (Twilio's default 1 s).
    Pause(Duration),
    /// `<Play digits="w159#"/>`: the digits as written (`0-9 * # A-D`, `w` = 0.5 s pause).
    PlayDigits(String),
    /// `<Dial>...</Dial>` or `<Refer><Sip>...</Sip></Refer>`: blind transfer by REFER.
    Transfer(DialTarget),
    /// `<Connect><Stream url="...">` with its `<Parameter>`s: bridge the call to this bot.
    ConnectStream {
        /// `ws://` or `wss://`.
        url: String,
        /// `<Parameter name value>`, in order (they go into `customParameters`).
        parameters: Vec<(String, String)>,
    },
    /// `<Reject reason="busy|rejected"/>` (only before the call is answered: 486 or 603).
    Reject {
        /// `reason="busy"` (486); otherwise 603.
        busy: bool,
    },
}

/// Placeholder until the parser lands.
pub fn parse(_xml: &str) -> Result<Vec<Verb>, String> {
    Err("TwiML parser not built yet".into())
}
