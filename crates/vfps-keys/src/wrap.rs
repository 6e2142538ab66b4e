//! What every key source is to the rest of the crate: something that wraps
//! and unwraps data keys under a key that never leaves it.

use vfps_core::Error;

use crate::{random_bytes, KEY_LEN};

/// What wraps and unwraps data keys: in this process (a key file), on a
/// token (PKCS#11), or by a service (a KMS), hence asynchronous.
#[async_trait::async_trait]
pub trait Wrap: Send + Sync {
    /// The wrapping key's id (stored beside what it wrapped).
    fn key_id(&self) -> String;
    /// A new data key and its wrapped form, bound to `context`: random from
    /// this machine's generator, wrapped; a KMS makes its own.
    async fn generate(&self, context: &[u8]) -> Result<([u8; KEY_LEN], Vec<u8>), Error> {
        let key = random_bytes::<KEY_LEN>()?;
        let wrapped = self.wrap(&key, context).await?;
        Ok((key, wrapped))
    }
    /// `key` wrapped, bound to `context`.
    async fn wrap(&self, key: &[u8; KEY_LEN], context: &[u8]) -> Result<Vec<u8>, Error>;
    /// The key `wrapped` holds, if it was wrapped by this key for `context`.
    async fn unwrap(&self, wrapped: &[u8], context: &[u8]) -> Result<[u8; KEY_LEN], Error>;
    /// For people and logs: the kind of source and its key id, never a key.
    fn describe(&self) -> String;
}
