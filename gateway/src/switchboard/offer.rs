//! Offer/answer for new calls under the SRTP policy: the one place that turns a caller's SDP
//! offer into our answer, the negotiated media and the SDES keys, or into a refusal with its
//! reason and `Warning` text.

use ontime_sip::{Codec, LocalMedia, NegotiatedMedia, SessionDescription, SrtpPolicy};
use tracing::info;

use crate::admission::RejectReason;

/// Our answer, the negotiated media, and the SDES keys when the media is SRTP.
pub(super) type Answered = (
    SessionDescription,
    NegotiatedMedia,
    Option<ontime_srtp::SdesKeys>,
);

/// Answer `offer` from `local` under `policy`; or why not (the refusal and its Warning text).
pub(super) fn answer_offer(
    offer: &SessionDescription,
    local: &LocalMedia,
    policy: SrtpPolicy,
) -> Result<Answered, (RejectReason, &'static str)> {
    let mut keys = None;
    let answered = ontime_sip::sdp::answer_offer_srtp(offer, local, policy, &mut |_, section| {
        match ontime_srtp::answer_offer(section.attribute_values("crypto")) {
            Ok(k) => {
                let line = k.local.to_string();
                keys = Some(k);
                Some(line)
            }
            Err(e) => {
                info!(reason = e.reason(), "offered crypto lines unusable");
                None
            }
        }
    });
    match answered {
        // Only the chosen section's keys count (the closure may have seen others first).
        Ok((answer, negotiated)) => Ok((answer, negotiated, keys.filter(|_| negotiated.srtp))),
        Err(ontime_sip::Error::Srtp(why)) => {
            info!(why, "SRTP policy refused the offer: 488");
            Err((RejectReason::Srtp, why))
        }
        Err(e) => {
            info!(error = %e, "no common codec: 488");
            Err((
                RejectReason::NoCommonCodec,
                "no common codec: none of the offered codecs is one this gateway speaks (--codecs)",
            ))
        }
    }
}

/// The media of a call whose offer is ours and whose answer has not come yet: no remote
/// address, so nothing is sent until [`crate::call::DialogEvent::Media`] brings the answer.
pub(super) fn awaiting_answer() -> NegotiatedMedia {
    NegotiatedMedia {
        remote_rtp: None,
        codec: Codec::Pcmu,
        payload_type: 0,
        telephone_event_pt: None,
        remote_ptime_ms: None,
        remote_maxptime_ms: None,
        local_direction: ontime_sip::Direction::SendRecv,
        srtp: false,
    }
}
