//! `ontime-gateway`: the SIP/RTP gateway binary (not yet implemented).

fn main() {
    eprintln!("ontime-gateway: not implemented yet");
    std::process::exit(2);
}
