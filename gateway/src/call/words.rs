//! Whether a caller's words, as a bot's speech recogniser wrote them, end where a sentence can
//! end: the transcript cue of the reply hold-back ([`super::hold_back`]).
//!
//! Rules on the last word and the final punctuation, not a model: a sentence that stops on
//! "to", "and", "the" or "um" is not finished, in any accent and at any speaking rate, and the
//! rules cost a few comparisons per transcript on the call's task. (A text model that judges
//! completeness would catch more, but the permissively licensed ones are large, and the one a
//! peer ships limits where it may run.) English only; another language's transcript ends in
//! words none of these lists holds and is judged [`WordsCue::Unknown`]: no change.
//!
//! Recognisers punctuate differently: some end every final result with a full stop, pauses
//! included, others never punctuate. So a word cue outranks a full stop ("… move it to." is
//! not finished), and a question mark outranks the word ("Where are you from?" is).

/// What the words say about the end of the caller's turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordsCue {
    /// They cannot end a sentence: a trailing conjunction, preposition, article, possessive,
    /// auxiliary or filler, or a trailing comma, dash or ellipsis.
    Incomplete,
    /// They end with a question mark, or a full stop or exclamation mark after a word that can
    /// end a sentence.
    Complete,
    /// Nothing either way (no punctuation, an ordinary last word, no words).
    Unknown,
}

impl WordsCue {
    /// The name in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            WordsCue::Incomplete => "incomplete",
            WordsCue::Complete => "complete",
            WordsCue::Unknown => "unknown",
        }
    }
}

/// Words that cannot end an English sentence said in full. Left out on purpose, because they
/// often do end one: "that", "this", "it", "up", "out", "off", "in", "on", "over", "too".
const TRAILING_INCOMPLETE: &[&str] = &[
    // Conjunctions.
    "and", "but", "or", "nor", "so", "because", "cause", "if", "unless", "although", "though",
    "while", "whereas", "than", "whether", "until", "till", "since", "when", "where",
    // Prepositions.
    "to", "of", "for", "at", "with", "from", "by", "about", "into", "onto", "between", "through",
    "during", "without", "towards", "toward", "via", "per", "like", "after", "before", "around",
    // Articles, determiners, possessives.
    "a", "an", "the", "my", "your", "our", "their", "his", "its", "every", "each", "some", "any",
    "another", "these", "those",
    // Auxiliaries and modals, and the subject pronouns before them.
    "i", "i'm", "i'd", "i'll", "i've", "we", "we're", "we'd", "we'll", "they", "am", "is", "are",
    "was", "were", "be", "been", "will", "would", "can", "could", "should", "shall", "must",
    "might", "may", "want", "wanted", "need", "needed", "going", "gonna", "wanna", "trying",
    // Fillers and hesitations.
    "um", "uh", "uhm", "umm", "uhh", "er", "erm", "ah", "hmm", "mm",
];

/// Judges `text`, the recogniser's words for the caller's turn so far (interim or final).
pub fn judge(text: &str) -> WordsCue {
    let text = text.trim_end();
    let Some(last_char) = text.chars().last() else {
        return WordsCue::Unknown;
    };
    if text.ends_with("...") || matches!(last_char, ',' | '-' | '–' | '—' | '…' | ';' | ':') {
        return WordsCue::Incomplete;
    }
    if last_char == '?' {
        return WordsCue::Complete;
    }
    let Some(last_word) = text.split_whitespace().last() else {
        return WordsCue::Unknown;
    };
    let word: String = last_word
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’')
        .chars()
        .map(|c| if c == '’' { '\'' } else { c })
        .flat_map(char::to_lowercase)
        .collect();
    if TRAILING_INCOMPLETE.contains(&word.as_str()) {
        return WordsCue::Incomplete;
    }
    if matches!(last_char, '.' | '!') {
        return WordsCue::Complete;
    }
    WordsCue::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_words_and_punctuation() {
        use WordsCue::*;
        for (text, cue) in [
            ("I'd like to move my appointment to", Incomplete),
            ("I'd like to move my appointment to.", Incomplete),
            ("I'd like to move my appointment to Friday.", Complete),
            ("I'd like to move my appointment to Friday", Unknown),
            (
                "Can you tell me what time the pharmacy closes and",
                Incomplete,
            ),
            ("My order number is, um", Incomplete),
            ("My order number is, Um.", Incomplete),
            ("My order number is,", Incomplete),
            ("So I was thinking...", Incomplete),
            ("So I was thinking —", Incomplete),
            ("Where are you from?", Complete),
            ("Yes.", Complete),
            ("Yes", Unknown),
            ("I’d", Incomplete),
            ("Please send it to the", Incomplete),
            ("  Friday!  ", Complete),
            ("", Unknown),
            ("   ", Unknown),
            ("...", Incomplete),
            ("?", Complete),
            ("Je voudrais déplacer mon rendez-vous à", Unknown),
        ] {
            assert_eq!(judge(text), cue, "{text:?}");
        }
    }

    /// The labelled set's sentences (`scripts/turnset.py`, the held-out half: odd indexes), as
    /// a recogniser with perfect words would write them: every prefix that stops between two
    /// words, and the whole sentence with and without a full stop.
    #[test]
    fn the_labelled_sets_held_out_sentences() {
        let sentences = [
            "The parcel never arrived and I have been waiting since Monday",
            "Can you tell me what time the pharmacy closes on Saturday",
            "Please send the invoice to my work email address",
            "We are looking for a table for four people tomorrow night",
            "Is it possible to pay the remaining balance by bank transfer",
            "Could you check whether my prescription is ready for collection",
            "The technician said he would come between nine and eleven",
            "My flight was cancelled and I need to rebook for tomorrow",
            "Can I bring my dog with me on the train to Edinburgh",
            "I would like to speak to someone about my insurance claim",
        ];
        let (mut gaps, mut incomplete, mut complete) = (0, 0, 0);
        let mut stopped = (0, 0);
        for s in sentences {
            let words: Vec<&str> = s.split(' ').collect();
            for n in 1..words.len() {
                let prefix = words[..n].join(" ");
                gaps += 1;
                match judge(&prefix) {
                    WordsCue::Incomplete => incomplete += 1,
                    WordsCue::Complete => complete += 1,
                    WordsCue::Unknown => {}
                }
                // A recogniser that ends results with a full stop at a pause.
                match judge(&format!("{prefix}.")) {
                    WordsCue::Incomplete => stopped.0 += 1,
                    WordsCue::Complete => stopped.1 += 1,
                    WordsCue::Unknown => panic!("{prefix}. judged unknown"),
                }
            }
            assert_eq!(judge(s), WordsCue::Unknown, "{s}");
            assert_eq!(judge(&format!("{s}.")), WordsCue::Complete, "{s}");
        }
        // Of the 97 places between two words, the last word catches 48 ("and", "to", "the",
        // "for", "my", "would", …); none is called complete unpunctuated. A stop after a noun
        // ("… the pharmacy", "… my work email") is left to the hold-back's other rules.
        assert_eq!((gaps, incomplete, complete), (97, 48, 0));
        // With a full stop the word still wins: the same 48, and the other 49 complete.
        assert_eq!(stopped, (48, 49));
        // The set's short answers are answered at once when punctuated.
        for short in [
            "Yes.",
            "No.",
            "Friday.",
            "That's right.",
            "Thank you.",
            "Tomorrow morning.",
            "Nine thirty.",
            "Sure.",
        ] {
            assert_eq!(judge(short), WordsCue::Complete, "{short}");
        }
        // The `paused` kind's first clauses all end on a noun or a number: nothing to go on
        // unpunctuated, incomplete with the pause's comma.
        for clause in [
            "I would like to book a room",
            "My account number is four seven two",
            "I called yesterday about the refund",
            "If the doctor is free on Monday",
            "We moved house last month",
            "The order number is nine one five",
            "I have been a customer for years",
            "Before I pay the bill",
            "Yes that is right",
            "When I tried to log in this morning",
            "Could you put me through to billing",
            "The car broke down on the motorway",
        ] {
            assert_eq!(judge(clause), WordsCue::Unknown, "{clause}");
            assert_eq!(
                judge(&format!("{clause},")),
                WordsCue::Incomplete,
                "{clause}"
            );
        }
    }
}
