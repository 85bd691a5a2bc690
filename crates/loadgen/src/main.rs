//! `ontime-load`: the capacity harness (not yet implemented; see issue "ontime-load").

fn main() {
    eprintln!("ontime-load: not implemented yet");
    std::process::exit(2);
}
