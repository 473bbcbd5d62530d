//! Continue tokens come back from clients as text (`?continue=`), so any string may arrive:
//! decoding must fail cleanly, and a token that decodes must encode to a token that decodes to
//! the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use revkv_storage::codec;

fuzz_target!(|input: &[u8]| {
    let text = String::from_utf8_lossy(input);
    let Ok(token) = codec::decode_page_token(&text) else {
        return;
    };
    let encoded = codec::encode_page_token(&token).expect("a decoded token encodes");
    let again = codec::decode_page_token(&encoded).expect("an encoded token decodes");
    assert_eq!(again, token, "a continue token changed on a round trip");
});
