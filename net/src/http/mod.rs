//! HTTP/1.1 for the upgrade and the plain endpoints, as pure functions over bytes.
//!
//! - [`request`]: [`request::parse_request`] turns a buffered request head into a
//!   [`request::Request`] under [`request::HttpLimits`], or says how it is wrong
//!   ([`request::HttpError`], one status code per variant).
//! - [`query`]: query strings with Python `parse_qsl(keep_blank_values=True)` semantics
//!   (PROTOCOL.md §2).
//! - [`response`]: response heads and bodies built into a `Vec<u8>`, JSON errors.
//!
//! Nothing here touches a socket; `net/src/rt/` feeds bytes in and writes bytes out.

pub mod query;
pub mod request;
pub mod response;
