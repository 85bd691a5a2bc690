//! SDES crypto attributes (RFC 4568): the RFC's examples, every refusal, offer/answer.

use ontime_srtp::{
    accept_answer, answer_offer, offer, CryptoAttribute, SdesError, Suite, MAX_SRTP_TAG_LEN,
};
use proptest::prelude::*;

/// RFC 4568 §9.1's offer and answer, as the RFC prints them: each key carries an MKI.
const RFC_OFFER: &str =
    "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:4";
const RFC_ANSWER: &str =
    "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:d0RmdmcmVCspeEc3QGZiNWpVLFJhQX1cfHAwJSoj|2^20|1:32";

#[test]
fn rfc_4568_examples() {
    // With their MKIs the lines are refused, by name: an MKI is not supported.
    assert_eq!(
        CryptoAttribute::parse(RFC_OFFER),
        Err(SdesError::MkiUnsupported)
    );
    assert_eq!(
        CryptoAttribute::parse(RFC_ANSWER),
        Err(SdesError::MkiUnsupported)
    );
    // Without them the keys read as the RFC's base64 says.
    let offer = CryptoAttribute::parse(RFC_OFFER.trim_end_matches("|1:4")).expect("offer");
    assert_eq!(offer.tag, 1);
    assert_eq!(offer.suite, Suite::AesCm128HmacSha1_80);
    assert_eq!(offer.master_key(), b"=-n@%^x!Bjufr9)?");
    assert_eq!(offer.master_salt(), b",#5h\\`=&]{qiPQ");
    assert_eq!(offer.lifetime, Some(1 << 20));
    let answer = CryptoAttribute::parse(RFC_ANSWER.trim_end_matches("|1:32")).expect("answer");
    assert_eq!(answer.master_key(), b"wDfvg&T+)xG7@fb5");
    assert_eq!(answer.master_salt(), b"jU,RaA}\\|p0%*#");
    // Formatting gives the line back.
    assert_eq!(
        offer.to_sdp_line(),
        "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20"
    );
    // The other forms of the same value: bare, `crypto:`-prefixed, with a line end.
    let bare = "1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR";
    for line in [
        bare.to_string(),
        format!("crypto:{bare}"),
        format!("a=crypto:{bare}\r\n"),
    ] {
        let a = CryptoAttribute::parse(&line).expect("parses");
        assert_eq!(a.master_key(), offer.master_key());
        assert_eq!(a.lifetime, None);
        assert_eq!(a.to_string(), bare);
    }
    // The _32 suite of RFC 4568 §6.2.
    let a = CryptoAttribute::parse(
        "1 AES_CM_128_HMAC_SHA1_32 inline:NzB4d1BINUAvLEw6UzF3WSJ+PSdFcGdUJShpX1Zj|2^20",
    )
    .expect("_32");
    assert_eq!(a.suite, Suite::AesCm128HmacSha1_32);
}

#[test]
fn every_refusal_is_named() {
    let key = "PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR";
    let cases: Vec<(String, SdesError)> = vec![
        ("".into(), SdesError::Syntax("empty line")),
        ("a=crypto:".into(), SdesError::Syntax("empty line")),
        ("1".into(), SdesError::Syntax("no crypto-suite")),
        (
            "1 AES_CM_128_HMAC_SHA1_80".into(),
            SdesError::Syntax("no key-params"),
        ),
        (
            format!("x1 AES_CM_128_HMAC_SHA1_80 inline:{key}"),
            SdesError::BadTag("x1".into()),
        ),
        (
            format!("1234567890 AES_CM_128_HMAC_SHA1_80 inline:{key}"),
            SdesError::BadTag("1234567890".into()),
        ),
        (
            format!("1 AES_256_CM_HMAC_SHA1_80 inline:{key}"),
            SdesError::UnknownSuite("AES_256_CM_HMAC_SHA1_80".into()),
        ),
        (
            format!("1 AEAD_AES_128_GCM inline:{key}"),
            SdesError::UnknownSuite("AEAD_AES_128_GCM".into()),
        ),
        (
            format!("1 aes_cm_128_hmac_sha1_80 inline:{key}"),
            SdesError::UnknownSuite("aes_cm_128_hmac_sha1_80".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 uri:{key}"),
            SdesError::UnknownKeyMethod("uri".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 {key}"),
            SdesError::Syntax("key-params without a key method"),
        ),
        (
            "1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVm*jkpPywjNWhcYD0mXXtxaVBR".into(),
            SdesError::BadBase64,
        ),
        (
            "1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtx".into(),
            SdesError::BadKeyLength(27),
        ),
        (
            "1 AES_CM_128_HMAC_SHA1_80 inline:".into(),
            SdesError::BadKeyLength(0),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}{key}"),
            SdesError::BadKeyLength(60),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|2^49"),
            SdesError::BadLifetime("2^49".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|0"),
            SdesError::BadLifetime("0".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|"),
            SdesError::BadLifetime("".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|2^"),
            SdesError::BadLifetime("2^".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|-5"),
            SdesError::BadLifetime("-5".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|2^20|2^20"),
            SdesError::Syntax("more than one lifetime"),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|1066:4"),
            SdesError::MkiUnsupported,
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|2^20|1:4;inline:{key}|2^20|2:4"),
            SdesError::MkiUnsupported,
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key} KDR=0"),
            SdesError::UnsupportedSessionParam("KDR".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key} UNENCRYPTED_SRTP"),
            SdesError::UnsupportedSessionParam("UNENCRYPTED_SRTP".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key} FEC_ORDER=FEC_SRTP"),
            SdesError::UnsupportedSessionParam("FEC_ORDER".into()),
        ),
        (
            format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key} WSH=lots"),
            SdesError::UnsupportedSessionParam("WSH=lots".into()),
        ),
    ];
    for (line, expected) in cases {
        assert_eq!(CryptoAttribute::parse(&line), Err(expected), "{line:?}");
    }
}

#[test]
fn lifetimes_and_session_parameters_accepted() {
    let key = "PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR";
    let a = CryptoAttribute::parse(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|1048576"))
        .expect("decimal lifetime");
    assert_eq!(a.lifetime, Some(1 << 20));
    assert!(a.to_string().ends_with("|2^20"));
    let a = CryptoAttribute::parse(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|1000"))
        .expect("decimal lifetime");
    assert!(a.to_string().ends_with("|1000"));
    let a = CryptoAttribute::parse(&format!("1 AES_CM_128_HMAC_SHA1_80 inline:{key}|2^48"))
        .expect("the longest lifetime");
    assert_eq!(a.lifetime, Some(1 << 48));
    let a = CryptoAttribute::parse(&format!(
        "7 AES_CM_128_HMAC_SHA1_32 inline:{key} WSH=128 -X_VENDOR=1"
    ))
    .expect("WSH and an optional parameter");
    assert_eq!((a.tag, a.window_size_hint), (7, Some(128)));
    assert_eq!(
        a.to_string(),
        format!("7 AES_CM_128_HMAC_SHA1_32 inline:{key} WSH=128")
    );
}

#[test]
fn errors_and_debug_never_show_the_key() {
    let a = CryptoAttribute::generate(1, Suite::AesCm128HmacSha1_80).expect("random");
    let line = a.to_string();
    let key_b64 = line.split("inline:").nth(1).expect("key");
    assert!(!format!("{a:?}").contains(key_b64));
    assert!(!format!("{:?}", a.context()).contains(key_b64));
    let broken = line.replace("inline:", "inline:*");
    let e = CryptoAttribute::parse(&broken).expect_err("bad base64");
    assert!(!e.to_string().contains(&key_b64[..20]), "{e}");
}

#[test]
fn answer_picks_the_first_supported_line() {
    let offer_lines = [
        "a=crypto:1 AEAD_AES_256_GCM inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR",
        "a=crypto:2 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:4",
        "a=crypto:3 AES_CM_128_HMAC_SHA1_32 inline:d0RmdmcmVCspeEc3QGZiNWpVLFJhQX1cfHAwJSoj",
        "a=crypto:4 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR",
    ];
    let keys = answer_offer(offer_lines).expect("line 3 is usable");
    assert_eq!(
        (keys.remote.tag, keys.remote.suite),
        (3, Suite::AesCm128HmacSha1_32)
    );
    assert_eq!(
        (keys.local.tag, keys.local.suite),
        (3, Suite::AesCm128HmacSha1_32)
    );
    assert_ne!(keys.local.master_key(), keys.remote.master_key());
    // A fresh key each time.
    let again = answer_offer(offer_lines).expect("usable");
    assert_ne!(again.local.master_key(), keys.local.master_key());
    assert_ne!(again.local.master_salt(), keys.local.master_salt());

    // Our answer works end to end: the peer keys its receiver with our answer's line, we key
    // ours with its offer.
    let mut peer_rx = CryptoAttribute::parse(&keys.local.to_sdp_line())
        .expect("our answer parses")
        .context();
    let mut peer_tx = CryptoAttribute::parse(offer_lines[2])
        .expect("offer")
        .context();
    let (mut out, mut inb) = (keys.outbound(), keys.inbound());
    let mut buf = [0u8; 12 + 20 + MAX_SRTP_TAG_LEN];
    buf[0] = 0x80;
    let n = out.protect(&mut buf, 32).expect("protect");
    assert_eq!(peer_rx.unprotect(&mut buf[..n]), Ok(32));
    let n = peer_tx.protect(&mut buf, 32).expect("protect");
    assert_eq!(inb.unprotect(&mut buf[..n]), Ok(32));

    // Nothing usable: the first line's reason is kept.
    assert_eq!(
        answer_offer([offer_lines[0], offer_lines[1]]),
        Err(SdesError::NoSupportedOffer(Some(Box::new(
            SdesError::UnknownSuite("AEAD_AES_256_GCM".into())
        ))))
    );
    let none = answer_offer([]).expect_err("no lines");
    assert_eq!(none, SdesError::NoSupportedOffer(None));
    assert_eq!(none.reason(), "no_supported_offer");
}

#[test]
fn offer_then_accept_answer() {
    let ours = offer().expect("random");
    assert_eq!(ours.len(), 2);
    assert_eq!(
        (ours[0].tag, ours[0].suite),
        (1, Suite::AesCm128HmacSha1_80)
    );
    assert_eq!(
        (ours[1].tag, ours[1].suite),
        (2, Suite::AesCm128HmacSha1_32)
    );
    // The peer answers our second line.
    let lines: Vec<String> = ours.iter().map(|a| a.to_sdp_line()).collect();
    let peer = answer_offer(lines[1..].iter().map(String::as_str)).expect("answer");
    let keys = accept_answer(&ours, &peer.local.to_sdp_line()).expect("matches");
    assert_eq!(keys.local, ours[1]);
    assert_eq!(keys.remote, peer.local);
    // Tag 2 with the other suite, or an unknown tag, does not match.
    let mut wrong = peer.local.clone();
    wrong.suite = Suite::AesCm128HmacSha1_80;
    assert_eq!(
        accept_answer(&ours, &wrong.to_string()),
        Err(SdesError::AnswerMismatch { tag: 2 })
    );
    wrong.tag = 9;
    assert_eq!(
        accept_answer(&ours, &wrong.to_string()),
        Err(SdesError::AnswerMismatch { tag: 9 })
    );
}

proptest! {
    /// Arbitrary text never panics the parser, and what parses formats back to a line that
    /// parses to the same attribute.
    #[test]
    fn parser_never_panics(line in "\\PC{0,120}") {
        if let Ok(a) = CryptoAttribute::parse(&line) {
            prop_assert_eq!(CryptoAttribute::parse(&a.to_string()), Ok(a));
        }
    }

    /// Lines shaped like crypto attributes, with random parts.
    #[test]
    fn shaped_lines_never_panic(
        tag in "[0-9x]{0,11}",
        suite in prop_oneof![Just("AES_CM_128_HMAC_SHA1_80"), Just("AES_CM_128_HMAC_SHA1_32"), Just("F8_128_HMAC_SHA1_80")],
        key in "[A-Za-z0-9+/=*]{0,50}",
        extra in "(\\|[0-9^:]{0,8}){0,3}( [A-Z_=0-9-]{0,12}){0,2}",
    ) {
        let line = format!("a=crypto:{tag} {suite} inline:{key}{extra}");
        if let Ok(a) = CryptoAttribute::parse(&line) {
            prop_assert_eq!(CryptoAttribute::parse(&a.to_sdp_line()), Ok(a));
        }
    }
}
