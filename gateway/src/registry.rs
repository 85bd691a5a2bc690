//! The call registry: every call the call-control API can see, by CallSid, with its Twilio
//! status, the channel to its task while it is up, and its status callbacks. It implements
//! [`CallControl`]: the HTTP API and embedding programs act on calls through it. Its lock is
//! held for a map lookup at a time, never across I/O, and the real-time sender never takes it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use ontime_twilio::webhook::{amd_params, call_params};
use ontime_twilio::{
    CallControl, CallFilter, CallStatus, CallUpdate, CallView, ControlError, Dial, DialNoun,
    DialTarget, Direction, LegTwiml, MachineDetection, NewCall, SipTarget, StatusCallback,
    StatusCallbackEvent, XHeaders,
};
use tokio::sync::mpsc;

use crate::agent::{AgentOutput, CallInfo};
use crate::api::{Callbacks, StatusReporter};
use crate::call::dial::DialEnd;
use crate::call::{CallCommand, TransferOutcome};

/// Ended calls kept for `GET` after they end (oldest forgotten first).
const ENDED_KEPT: usize = 1000;

/// What the registry asks of the switchboard.
#[derive(Debug)]
pub(crate) enum RegistryRequest {
    /// Place this call (its entry exists, `queued`).
    DialOut {
        /// The CallSid.
        sid: String,
        /// What to place (boxed: it is most of the request's size).
        call: Box<NewCall>,
    },
    /// End a call not answered yet: CANCEL ours, refuse theirs.
    EndRinging {
        /// The CallSid.
        sid: String,
    },
}

struct Entry {
    view: CallView,
    /// The call task's command channel, while the call is up.
    control: Option<mpsc::UnboundedSender<CallCommand>>,
    /// Where the call's progress goes, if it asked (`StatusCallback`).
    status_callback: Option<StatusCallback>,
    reporter: Option<StatusReporter>,
    /// Answering-machine detection, if the call was placed with it.
    machine_detection: Option<MachineDetection>,
    /// The `Url=` whose fetch waits for detection's verdict (`NewCall::twiml_url`).
    twiml_url: Option<(String, bool)>,
    /// A `<Dial>`'s leg: the call that dialled it, and where its audio goes once answered.
    parent: Option<(String, AgentOutput)>,
    /// A `<Dial>`'s leg: the TwiML it runs before its bridge (`<Number url>`).
    whisper: Option<LegTwiml>,
    /// A `<Dial>`'s leg that was bridged (the first of its `<Dial>` to answer).
    bridged: bool,
    /// A call with a `<Dial>` leg: where that leg's own input is handed once it answers.
    bridge_inbox: Option<mpsc::UnboundedSender<AgentOutput>>,
}

#[derive(Default)]
struct Inner {
    calls: HashMap<String, Entry>,
    /// Ended calls, oldest first, for forgetting.
    ended: VecDeque<String>,
}

/// Every call the API can see.
pub struct CallRegistry {
    account_sid: String,
    inner: Mutex<Inner>,
    sip: mpsc::UnboundedSender<RegistryRequest>,
    callbacks: Callbacks,
    /// Whether dial-out has somewhere to go.
    has_trunk: bool,
    /// Whether new calls are admitted now (capacity and drain), checked before dialling.
    can_admit: Box<dyn Fn() -> bool + Send + Sync>,
}

impl std::fmt::Debug for CallRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallRegistry")
            .field("account_sid", &self.account_sid)
            .finish_non_exhaustive()
    }
}

impl CallRegistry {
    pub(crate) fn new(
        account_sid: String,
        sip: mpsc::UnboundedSender<RegistryRequest>,
        callbacks: Callbacks,
        has_trunk: bool,
        can_admit: Box<dyn Fn() -> bool + Send + Sync>,
    ) -> CallRegistry {
        CallRegistry {
            account_sid,
            inner: Mutex::new(Inner::default()),
            sip,
            callbacks,
            has_trunk,
            can_admit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves plain data behind: keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An inbound call arrived (ringing).
    pub(crate) fn inbound(&self, info: &CallInfo) {
        let now = SystemTime::now();
        let view = CallView {
            sid: info.call_sid.clone(),
            account_sid: self.account_sid.clone(),
            from: info.from.clone(),
            to: info.to.clone(),
            status: CallStatus::Ringing,
            direction: Direction::Inbound,
            date_created: now,
            date_updated: now,
            start_time: None,
            end_time: None,
            duration_secs: None,
            sip_call_id: info.call_id.clone(),
            answered_by: None,
            parent_call_sid: None,
        };
        self.lock().calls.insert(
            view.sid.clone(),
            Entry {
                view,
                control: None,
                status_callback: None,
                reporter: None,
                machine_detection: None,
                twiml_url: None,
                parent: None,
                bridge_inbox: None,
                whisper: None,
                bridged: false,
            },
        );
    }

    /// The SIP Call-ID of an outbound call is known (its INVITE left).
    pub(crate) fn initiated(&self, sid: &str, sip_call_id: &str) {
        let mut inner = self.lock();
        if let Some(e) = inner.calls.get_mut(sid) {
            e.view.sip_call_id = sip_call_id.to_string();
            e.view.date_updated = SystemTime::now();
        }
        drop(inner);
        self.callback(sid, StatusCallbackEvent::Initiated, None);
    }

    /// An outbound call rings (first 180/183).
    pub(crate) fn ringing(&self, sid: &str, sip_status: u16) {
        if self.set_status(sid, CallStatus::Ringing) {
            self.callback(sid, StatusCallbackEvent::Ringing, Some(sip_status));
        }
    }

    /// The call was answered; its task takes commands on `control`.
    pub(crate) fn answered(&self, sid: &str, control: mpsc::UnboundedSender<CallCommand>) {
        self.attach(sid, control);
        self.mark_answered(sid);
    }

    /// The call's task takes commands on `control` (answered or not yet).
    pub(crate) fn attach(&self, sid: &str, control: mpsc::UnboundedSender<CallCommand>) {
        if let Some(e) = self.lock().calls.get_mut(sid) {
            e.control = Some(control);
        }
    }

    /// The call was answered now.
    pub(crate) fn mark_answered(&self, sid: &str) {
        let mut inner = self.lock();
        let Some(e) = inner.calls.get_mut(sid) else {
            return;
        };
        let now = SystemTime::now();
        e.view.status = CallStatus::InProgress;
        e.view.start_time = Some(now);
        e.view.date_updated = now;
        drop(inner);
        self.callback(sid, StatusCallbackEvent::Answered, Some(200));
    }

    /// The answering-machine detection a call was placed with, and the `Url=` whose fetch
    /// waits for its verdict.
    pub(crate) fn machine_detection(
        &self,
        sid: &str,
    ) -> Option<(MachineDetection, Option<(String, bool)>)> {
        let inner = self.lock();
        let e = inner.calls.get(sid)?;
        Some((e.machine_detection.clone()?, e.twiml_url.clone()))
    }

    /// Detection gave its verdict: the call's view shows it (`answered_by`, and `AnsweredBy` in
    /// its later status callbacks), an asynchronous detection's `AsyncAmdStatusCallback` hears
    /// it (signed, as the status callbacks). Returns the parameters that carry it (the held
    /// TwiML fetch's), `None` for a call the registry does not know.
    pub(crate) fn amd_verdict(
        &self,
        sid: &str,
        answered_by: &str,
        took: Duration,
    ) -> Option<Vec<(String, String)>> {
        let mut inner = self.lock();
        let e = inner.calls.get_mut(sid)?;
        e.view.answered_by = Some(answered_by.to_string());
        e.view.date_updated = SystemTime::now();
        let params = amd_params(&e.view, answered_by, took);
        let asynchronous = e.machine_detection.as_ref().filter(|m| m.asynchronous);
        if let Some(cb) = asynchronous.and_then(|m| m.status_callback.as_ref()) {
            let target = StatusCallback {
                url: cb.url.clone(),
                method_get: cb.method_get,
                events: Vec::new(),
            };
            self.callbacks.send(&target, params.clone());
        }
        Some(params)
    }

    /// The client that fetches TwiML and posts callbacks.
    pub(crate) fn callbacks(&self) -> &Callbacks {
        &self.callbacks
    }

    /// A transfer ended: the status callback hears of it.
    pub(crate) fn transferred(&self, sid: &str, outcome: &TransferOutcome) {
        let extra = vec![
            ("TransferTarget".to_string(), outcome.target.clone()),
            (
                "TransferResult".to_string(),
                outcome.result.as_str().to_string(),
            ),
        ];
        self.transfer_callback(sid, outcome.sip_status, extra);
    }

    /// The call ended with this final status (`sip_status`: the response that decided it).
    pub(crate) fn ended(&self, sid: &str, status: CallStatus, sip_status: Option<u16>) {
        let mut inner = self.lock();
        let Some(e) = inner.calls.get_mut(sid) else {
            return;
        };
        if e.view.status.is_final() {
            return;
        }
        let now = SystemTime::now();
        e.view.status = status;
        e.view.end_time = Some(now);
        e.view.date_updated = now;
        e.view.duration_secs = Some(
            e.view
                .start_time
                .and_then(|s| now.duration_since(s).ok())
                .map_or(0, |d| d.as_secs()),
        );
        e.control = None;
        // A `<Dial>` leg: the call that dialled it runs on.
        let parent_told = e.parent.as_ref().map(|(parent, _)| {
            (
                parent.clone(),
                DialEnd {
                    call_sid: Some(sid.to_string()),
                    status,
                    sip_status,
                    duration_secs: e.view.duration_secs.unwrap_or(0),
                },
            )
        });
        if let Some((parent, end)) = parent_told {
            if let Some(c) = inner.calls.get(&parent).and_then(|p| p.control.as_ref()) {
                let _ = c.send(CallCommand::DialEnded(end));
            }
        }
        inner.ended.push_back(sid.to_string());
        while inner.ended.len() > ENDED_KEPT {
            if let Some(old) = inner.ended.pop_front() {
                inner.calls.remove(&old);
            }
        }
        drop(inner);
        self.callback(sid, StatusCallbackEvent::Completed, sip_status);
    }

    /// Register an outbound call about to be placed.
    fn outbound(&self, sid: &str, call: &NewCall) -> CallView {
        let now = SystemTime::now();
        let view = CallView {
            sid: sid.to_string(),
            account_sid: self.account_sid.clone(),
            from: call.from.clone(),
            to: call.to.clone(),
            status: CallStatus::Queued,
            direction: Direction::OutboundApi,
            date_created: now,
            date_updated: now,
            start_time: None,
            end_time: None,
            duration_secs: None,
            sip_call_id: String::new(),
            answered_by: None,
            parent_call_sid: None,
        };
        self.lock().calls.insert(
            sid.to_string(),
            Entry {
                view: view.clone(),
                control: None,
                status_callback: call.status_callback.clone(),
                reporter: call
                    .status_callback
                    .clone()
                    .map(|cb| self.callbacks.reporter(cb)),
                machine_detection: call.machine_detection.clone(),
                twiml_url: call.twiml_url.clone(),
                parent: None,
                bridge_inbox: None,
                whisper: None,
                bridged: false,
            },
        );
        view
    }

    /// Place a `<Dial>`'s leg for the call `parent` (whose facts are `info`): the leg's
    /// audio will go to `parent_input`, and its own input reaches `inbox` once it answers
    /// ([`CallRegistry::take_bridge`], [`CallRegistry::bridged`]); its end reaches the
    /// parent as [`CallCommand::DialEnded`]. Returns the leg's CallSid.
    pub(crate) fn dial(
        &self,
        parent: &CallInfo,
        dial: &Dial,
        noun: &DialNoun,
        parent_input: AgentOutput,
        inbox: mpsc::UnboundedSender<AgentOutput>,
    ) -> Result<String, ControlError> {
        if !self.has_trunk {
            return Err(ControlError::NoTrunk);
        }
        if !(self.can_admit)() {
            return Err(ControlError::AtCapacity);
        }
        let (to, sip_headers) = match &noun.target {
            DialTarget::Number(n) => (n.clone(), XHeaders::default()),
            // The URI's X- headers were checked when the TwiML was read.
            DialTarget::Sip(uri) => match SipTarget::parse(uri) {
                Ok(t) => (t.uri, t.headers),
                Err(_) => (uri.clone(), XHeaders::default()),
            },
        };
        let call = NewCall {
            to,
            sip_headers,
            // Twilio's default caller ID for a `<Dial>` is the caller's own.
            from: dial
                .caller_id
                .clone()
                .unwrap_or_else(|| parent.from.clone()),
            twiml: Vec::new(),
            twiml_url: None,
            machine_detection: None,
            timeout: dial.timeout,
            status_callback: None,
        };
        let sid = crate::call::new_call_sid();
        self.outbound(&sid, &call);
        {
            let mut inner = self.lock();
            if let Some(e) = inner.calls.get_mut(&sid) {
                e.view.direction = Direction::OutboundDial;
                e.view.parent_call_sid = Some(parent.call_sid.clone());
                e.parent = Some((parent.call_sid.clone(), parent_input));
                e.whisper = noun.whisper.clone();
            }
            if let Some(e) = inner.calls.get_mut(&parent.call_sid) {
                e.bridge_inbox = Some(inbox);
            }
        }
        let _ = self.sip.send(RegistryRequest::DialOut {
            sid: sid.clone(),
            call: Box::new(call),
        });
        Ok(sid)
    }

    /// The input of the call a `<Dial>` leg is bridged to, if `sid` is one.
    pub(crate) fn take_bridge(&self, sid: &str) -> Option<AgentOutput> {
        let inner = self.lock();
        inner
            .calls
            .get(sid)
            .and_then(|e| e.parent.as_ref())
            .map(|(_, input)| input.clone())
    }

    /// The TwiML the `<Dial>` leg `sid` runs before its bridge, if it has one, and the
    /// parameters to fetch it with: Twilio's for the leg (its own CallSid, `Direction`
    /// `outbound-dial`, `CallStatus` `in-progress`) and `ParentCallSid`.
    pub(crate) fn whisper(
        &self,
        sid: &str,
        info: &CallInfo,
    ) -> Option<(LegTwiml, Vec<(String, String)>)> {
        let inner = self.lock();
        let e = inner.calls.get(sid)?;
        let whisper = e.whisper.clone()?;
        let mut params = crate::routing::webhook_params(info);
        for (k, v) in params.iter_mut() {
            match k.as_str() {
                "CallStatus" => *v = "in-progress".into(),
                "Direction" => *v = e.view.direction.as_str().into(),
                _ => {}
            }
        }
        if let Some((parent, _)) = &e.parent {
            params.push(("ParentCallSid".into(), parent.clone()));
        }
        Some((whisper, params))
    }

    /// The `<Dial>` leg `sid` answered and takes its audio on `input`: if it is the first of
    /// its `<Dial>`'s legs to, the call that dialled it is told, with the input, and the
    /// other legs still up are ended (cancelled while they ring). `false` if that call is gone
    /// or another leg was bridged first: the leg is not wanted.
    pub(crate) fn bridged(&self, sid: &str, input: AgentOutput) -> bool {
        let mut inner = self.lock();
        let Some((parent, _)) = inner.calls.get(sid).and_then(|e| e.parent.clone()) else {
            return false;
        };
        // The legs of the same `<Dial>`: the other calls of this parent not over yet (legs of
        // an earlier `<Dial>` of the call are over before a new one places any).
        let siblings: Vec<String> = inner
            .calls
            .iter()
            .filter(|(other, e)| {
                other.as_str() != sid
                    && !e.view.status.is_final()
                    && e.parent.as_ref().is_some_and(|(p, _)| *p == parent)
            })
            .map(|(other, _)| other.clone())
            .collect();
        if siblings
            .iter()
            .any(|other| inner.calls.get(other).is_some_and(|e| e.bridged))
        {
            return false;
        }
        let told = match inner
            .calls
            .get(&parent)
            .map(|p| (&p.bridge_inbox, &p.control))
        {
            Some((Some(inbox), Some(control))) => {
                inbox.send(input).is_ok()
                    && control
                        .send(CallCommand::DialAnswered(sid.to_string()))
                        .is_ok()
            }
            _ => false,
        };
        if !told {
            return false;
        }
        if let Some(e) = inner.calls.get_mut(sid) {
            e.bridged = true;
        }
        drop(inner);
        for other in siblings {
            self.end(&other);
        }
        true
    }

    /// End call `sid` whatever its state (a `<Dial>` leg whose caller is gone, or whose
    /// bridge reached its time limit).
    pub(crate) fn end(&self, sid: &str) {
        let _ = self.update(sid, CallUpdate::Complete);
    }

    fn set_status(&self, sid: &str, status: CallStatus) -> bool {
        let mut inner = self.lock();
        match inner.calls.get_mut(sid) {
            Some(e) if e.view.status != status && !e.view.status.is_final() => {
                e.view.status = status;
                e.view.date_updated = SystemTime::now();
                true
            }
            _ => false,
        }
    }

    /// Report `event` to the call's status callback, if it asked for it.
    fn callback(&self, sid: &str, event: StatusCallbackEvent, sip_status: Option<u16>) {
        let inner = self.lock();
        if let Some(e) = inner.calls.get(sid) {
            if let Some(r) = &e.reporter {
                r.report(event, &e.view, sip_status);
            }
        }
    }

    /// Tell the call's status callback how a transfer ended (always, if it has one: a bot
    /// that asked for a transfer needs to know it did not happen).
    fn transfer_callback(&self, sid: &str, sip_status: Option<u16>, extra: Vec<(String, String)>) {
        let inner = self.lock();
        let Some(e) = inner.calls.get(sid) else {
            return;
        };
        let Some(target) = &e.status_callback else {
            return;
        };
        let mut params = call_params(&e.view);
        if let Some(s) = sip_status {
            params.push(("SipResponseCode".to_string(), s.to_string()));
        }
        params.extend(extra);
        self.callbacks.send(target, params);
    }
}

impl CallControl for CallRegistry {
    fn account_sid(&self) -> &str {
        &self.account_sid
    }

    fn get(&self, sid: &str) -> Option<CallView> {
        self.lock().calls.get(sid).map(|e| e.view.clone())
    }

    fn list(&self, filter: &CallFilter) -> Vec<CallView> {
        let inner = self.lock();
        let mut calls: Vec<CallView> = inner
            .calls
            .values()
            .map(|e| &e.view)
            .filter(|v| filter.status.is_none_or(|s| v.status == s))
            .filter(|v| filter.to.as_ref().is_none_or(|t| &v.to == t))
            .filter(|v| filter.from.as_ref().is_none_or(|f| &v.from == f))
            .cloned()
            .collect();
        drop(inner);
        calls.sort_by_key(|c| std::cmp::Reverse(c.date_created));
        calls
    }

    fn update(&self, sid: &str, update: CallUpdate) -> Result<CallView, ControlError> {
        let inner = self.lock();
        let e = inner
            .calls
            .get(sid)
            .ok_or_else(|| ControlError::NotFound(sid.to_string()))?;
        let view = e.view.clone();
        match (update, view.status) {
            // Hanging up a call that is over already is done: say so, as the call is.
            (CallUpdate::Complete | CallUpdate::Cancel, s) if s.is_final() => Ok(view),
            (_, s) if s.is_final() => Err(ControlError::NotInProgress),
            (CallUpdate::Complete, CallStatus::InProgress) => {
                if let Some(c) = &e.control {
                    let _ = c.send(CallCommand::Complete);
                }
                Ok(view)
            }
            (CallUpdate::Run(verbs), CallStatus::InProgress) => {
                if let Some(c) = &e.control {
                    let _ = c.send(CallCommand::Run(verbs));
                }
                Ok(view)
            }
            (CallUpdate::Run(_), _) => Err(ControlError::NotInProgress),
            // Twilio: canceling an answered call does nothing.
            (CallUpdate::Cancel, CallStatus::InProgress) => Ok(view),
            // Not answered yet: `completed` and `canceled` both end it.
            (CallUpdate::Complete | CallUpdate::Cancel, _) => {
                let _ = self.sip.send(RegistryRequest::EndRinging {
                    sid: sid.to_string(),
                });
                Ok(view)
            }
        }
    }

    fn create(&self, call: NewCall) -> Result<CallView, ControlError> {
        if !self.has_trunk {
            return Err(ControlError::NoTrunk);
        }
        if !(self.can_admit)() {
            return Err(ControlError::AtCapacity);
        }
        let sid = crate::call::new_call_sid();
        let view = self.outbound(&sid, &call);
        let _ = self.sip.send(RegistryRequest::DialOut {
            sid,
            call: Box::new(call),
        });
        Ok(view)
    }
}
