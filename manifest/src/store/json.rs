//! A generic JSON codec for [`CasObject`](super::CasObject) values
//! (docs/ARCHITECTURE.md): the stored bytes are the
//! value's `serde_json` encoding, compact or pretty as the value's type says.
//!
//! Owns [`JsonCodec`] and the [`JsonObject`] trait a value implements to be
//! stored with it: its write token, its layout, and the checks a decoded value
//! must pass before anyone trusts it (format version, ordering, …).
//!
//! Invariants: `decode(encode(v)) == v` for every value that passes its own
//! checks; a value that fails them is never returned by `decode`; the layout
//! is part of an object's format and never changes for a stored type.

use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::cas::CasCodec;

/// How a JSON object's bytes are laid out (part of its format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonLayout {
    /// `serde_json::to_vec`.
    Compact,
    /// `serde_json::to_vec_pretty`.
    Pretty,
}

/// A value stored as JSON in a CAS object.
pub trait JsonObject: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    /// What encoding and decoding fail with (it carries `serde_json`'s errors).
    type Error: std::error::Error + From<serde_json::Error> + Send + Sync + 'static;
    /// The layout of the stored bytes.
    const LAYOUT: JsonLayout = JsonLayout::Compact;
    /// The random token unique to the write that produced this value (see
    /// [`CasCodec::write_token`]).
    fn write_token(&self) -> [u8; 16];
    /// Checks a decoded value before it is trusted; the default accepts all.
    fn check(&self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// The [`CasCodec`] of any [`JsonObject`].
pub struct JsonCodec<T>(PhantomData<fn() -> T>);

impl<T: JsonObject> CasCodec for JsonCodec<T> {
    type Value = T;
    type Error = T::Error;

    fn encode(value: &T) -> Result<Bytes, T::Error> {
        let bytes = match T::LAYOUT {
            JsonLayout::Compact => serde_json::to_vec(value)?,
            JsonLayout::Pretty => serde_json::to_vec_pretty(value)?,
        };
        Ok(Bytes::from(bytes))
    }

    fn decode(bytes: &Bytes) -> Result<T, T::Error> {
        let value: T = serde_json::from_slice(bytes)?;
        value.check()?;
        Ok(value)
    }

    fn write_token(value: &T) -> [u8; 16] {
        value.write_token()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CasError, CasObject, RetryPolicy};
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStore, ObjectStoreExt};
    use serde::Deserialize;
    use std::sync::Arc;

    #[derive(Debug, thiserror::Error)]
    enum NoteError {
        #[error("note JSON: {0}")]
        Json(#[from] serde_json::Error),
        #[error("unsupported note format {0}")]
        Format(u32),
    }

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    struct Note {
        format: u32,
        text: String,
        token: u8,
    }

    impl JsonObject for Note {
        type Error = NoteError;
        fn write_token(&self) -> [u8; 16] {
            [self.token; 16]
        }
        fn check(&self) -> Result<(), NoteError> {
            match self.format {
                1 => Ok(()),
                other => Err(NoteError::Format(other)),
            }
        }
    }

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    struct Pretty {
        a: u32,
    }

    impl JsonObject for Pretty {
        type Error = serde_json::Error;
        const LAYOUT: JsonLayout = JsonLayout::Pretty;
        fn write_token(&self) -> [u8; 16] {
            [0; 16]
        }
    }

    fn note(token: u8) -> Note {
        Note {
            format: 1,
            text: "hello".into(),
            token,
        }
    }

    #[test]
    fn values_round_trip_in_their_layout() {
        let bytes = JsonCodec::<Note>::encode(&note(3)).unwrap();
        assert_eq!(&bytes[..], br#"{"format":1,"text":"hello","token":3}"#);
        assert_eq!(JsonCodec::<Note>::decode(&bytes).unwrap(), note(3));
        assert_eq!(JsonCodec::<Note>::write_token(&note(3)), [3; 16]);
        let pretty = JsonCodec::<Pretty>::encode(&Pretty { a: 1 }).unwrap();
        assert_eq!(&pretty[..], b"{\n  \"a\": 1\n}");
        assert_eq!(
            JsonCodec::<Pretty>::decode(&pretty).unwrap(),
            Pretty { a: 1 }
        );
    }

    #[test]
    fn decoding_runs_the_value_checks() {
        let bytes = Bytes::from_static(br#"{"format":2,"text":"x","token":1}"#);
        assert!(matches!(
            JsonCodec::<Note>::decode(&bytes),
            Err(NoteError::Format(2))
        ));
        assert!(matches!(
            JsonCodec::<Note>::decode(&Bytes::from_static(b"{not json")),
            Err(NoteError::Json(_))
        ));
    }

    #[tokio::test]
    async fn a_json_cas_object_creates_replaces_and_conflicts() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let obj = CasObject::<JsonCodec<Note>>::new(
            store.clone(),
            Path::from("notes/n1.json"),
            RetryPolicy::default(),
        );
        let v1 = obj.create(note(1)).await.unwrap();
        let v2 = obj.replace(&v1, note(2)).await.unwrap();
        assert!(matches!(
            obj.replace(&v1, note(3)).await,
            Err(CasError::Conflict { .. })
        ));
        assert_eq!(obj.load().await.unwrap().unwrap().value, v2.value);
        // Stored bytes that fail the checks are reported corrupt.
        store
            .put(
                obj.path(),
                Bytes::from_static(br#"{"format":9,"text":"x","token":1}"#).into(),
            )
            .await
            .unwrap();
        assert!(matches!(
            obj.load().await,
            Err(CasError::Corrupt {
                source: NoteError::Format(9),
                ..
            })
        ));
    }
}
