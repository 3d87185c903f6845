//! The compact layout of a stored response (codec version 3's `RESPONSE_VERSION`): header
//! names most answers carry as one byte, a `content-length` equal to the body's length and an
//! HTTP-form `date` as a code, the body as it is. Decoding never panics.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, header};

use super::{In, Out, RESPONSE_VERSION};
use crate::operation::StoredResponse;

/// Header names a stored response keeps as one byte (their index plus one; 0 is a name
/// spelled out). Append only.
pub(super) static NAMES: [HeaderName; 16] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::DATE,
    header::SERVER,
    header::CONNECTION,
    header::CACHE_CONTROL,
    header::ETAG,
    header::VARY,
    header::LOCATION,
    header::CONTENT_ENCODING,
    header::LAST_MODIFIED,
    header::ACCESS_CONTROL_ALLOW_ORIGIN,
    header::STRICT_TRANSPORT_SECURITY,
    header::TRANSFER_ENCODING,
    HeaderName::from_static("x-request-id"),
    HeaderName::from_static("request-id"),
];

/// The name code of a `content-length` whose value is the body's length, kept without it.
pub(super) const BODY_LENGTH: u64 = 17;

/// The name code of a `date` in the HTTP form (IMF-fixdate), kept as its seconds since 1970.
pub(super) const DATE_SECONDS: u64 = 18;

/// IMF-fixdate (RFC 9110 section 5.6.7), the form of every `date` header this proxy sees.
const IMF_FIXDATE: &[time::format_description::BorrowedFormatItem<'static>] = time::macros::format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);

/// The seconds since 1970 a `date` value spells, if formatting them gives back exactly it.
pub(super) fn date_seconds(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let at = time::PrimitiveDateTime::parse(text, IMF_FIXDATE)
        .ok()?
        .assume_utc();
    let seconds = u64::try_from(at.unix_timestamp()).ok()?;
    (date_text(seconds)?.as_bytes() == value).then_some(seconds)
}

pub(super) fn date_text(seconds: u64) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp(i64::try_from(seconds).ok()?).ok()?;
    at.format(IMF_FIXDATE).ok()
}

/// `RESPONSE_VERSION`, the status, the header count, each header (a name code, or 0 and the
/// name; then the value) and the body. A `content-length` equal to the body's length is kept
/// as its code alone, a `date` in the HTTP form as its code and seconds.
pub(in crate::ledger) fn encode_response(response: &StoredResponse) -> Vec<u8> {
    let headers_len: usize = response
        .headers
        .iter()
        .map(|(n, v)| 4 + n.as_str().len() + v.len())
        .sum();
    let mut out = Out(Vec::with_capacity(8 + headers_len + response.body.len()));
    out.0.push(RESPONSE_VERSION);
    out.uint(u64::from(response.status));
    out.uint(response.headers.len() as u64);
    let body_length = response.body.len().to_string();
    for (name, value) in &response.headers {
        if name == header::CONTENT_LENGTH && value.as_bytes() == body_length.as_bytes() {
            out.uint(BODY_LENGTH);
            continue;
        }
        if name == header::DATE
            && let Some(seconds) = date_seconds(value.as_bytes())
        {
            out.uint(DATE_SECONDS);
            out.uint(seconds);
            continue;
        }
        match NAMES.iter().position(|n| n == name) {
            Some(i) => out.uint(i as u64 + 1),
            None => {
                out.uint(0);
                out.text(name.as_str());
            }
        }
        out.bytes(value.as_bytes());
    }
    out.0.extend_from_slice(&response.body);
    out.0
}

/// The response `encode_response` wrote, or `None` if `bytes` are not one.
pub(in crate::ledger) fn decode_response(bytes: &[u8]) -> Option<StoredResponse> {
    // One copy of the stored bytes, which the header values and the body then share.
    let shared = Bytes::copy_from_slice(bytes);
    let mut input = In(&shared);
    if input.byte()? != RESPONSE_VERSION {
        return None;
    }
    let status = u16::try_from(input.uint()?).ok()?;
    let count = input.uint()?;
    // The headers first, then the body they lead: a `content-length` kept as its code alone
    // is the body's length. Room for the headers a stored count names, within reason (it is
    // read from the file), and for the three `Idem-*` headers a replay adds.
    let mut read = Vec::with_capacity(count.min(64) as usize);
    for _ in 0..count {
        let code = input.uint()?;
        let header = match code {
            BODY_LENGTH => (header::CONTENT_LENGTH, None),
            DATE_SECONDS => {
                let text = date_text(input.uint()?)?;
                (header::DATE, Some(Err(HeaderValue::from_str(&text).ok()?)))
            }
            0 => {
                let name = HeaderName::from_bytes(input.text()?.as_bytes()).ok()?;
                (name, Some(Ok(input.bytes()?)))
            }
            i => {
                let name = NAMES.get(usize::try_from(i - 1).ok()?)?.clone();
                (name, Some(Ok(input.bytes()?)))
            }
        };
        read.push(header);
    }
    let body = shared.slice_ref(input.0);
    let mut headers = HeaderMap::with_capacity(read.len() + 3);
    for (name, value) in read {
        let value = match value {
            Some(Ok(v)) => HeaderValue::from_maybe_shared(shared.slice_ref(v)).ok()?,
            Some(Err(rebuilt)) => rebuilt,
            None => HeaderValue::from(body.len()),
        };
        headers.append(name, value);
    }
    Some(StoredResponse {
        status,
        headers,
        body,
    })
}
