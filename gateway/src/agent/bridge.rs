//! The agent of a bridged `<Dial>`: each leg's caller audio is the other leg's reply. The two
//! legs' call tasks each run one [`BridgeEnd`]; what one hears (after its jitter buffer) is
//! queued on the other's sender, as any agent's reply is, and digits pressed on one are sent
//! on the other.

use std::sync::Arc;

use super::{AgentAction, AgentCall, AgentEvent, AgentOutput};

/// One leg's side of a bridge.
pub(crate) struct BridgeEnd {
    /// The other leg's input.
    peer: AgentOutput,
}

impl BridgeEnd {
    /// A leg (its own input `own`) bridged to the leg whose input is `peer`. The leg's own
    /// speech must not cut what it hears: that is the other party talking, not a reply.
    pub(crate) fn new(own: &AgentOutput, peer: AgentOutput) -> BridgeEnd {
        own.send(AgentAction::AllowBargeIn(false));
        BridgeEnd { peer }
    }
}

impl AgentCall for BridgeEnd {
    fn on_event(&mut self, event: AgentEvent<'_>) {
        match event {
            AgentEvent::CallerAudio(pcm) => self.peer.send(AgentAction::Play(Arc::from(pcm))),
            AgentEvent::Dtmf(d) => self.peer.send(AgentAction::SendDigits(d.to_string())),
            _ => {}
        }
    }
}
