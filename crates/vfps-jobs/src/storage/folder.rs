//! Job files in a local folder: the embedded default, beside the SQLite file.
//!
//! Objects are files under the root, named by their keys. A multipart upload
//! is a directory of part files under `.multipart/<id>/`; completing it writes
//! their concatenation to a temporary file and renames it over the key, so the
//! object appears only whole. Every write is a new file renamed into place,
//! synced first, so an object is never seen half-written, even after a crash.
//! Several replicas may share the folder (a shared volume): nothing is held in
//! memory between calls.

use std::{
    io,
    path::{Component, Path, PathBuf},
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::{ByteStream, ListedPart, ObjectStore, StorageError, Transfer};

/// Job files in a folder.
#[derive(Debug, Clone)]
pub struct Folder {
    root: PathBuf,
}

const MULTIPART: &str = ".multipart";
const TEMPORARY: &str = ".tmp";

impl Folder {
    /// Uses (and creates) `root`.
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        std::fs::create_dir_all(root.join(MULTIPART))?;
        std::fs::create_dir_all(root.join(TEMPORARY))?;
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of `key`; keys are relative paths without `..`.
    fn path(&self, key: &str) -> Result<PathBuf, StorageError> {
        let relative = Path::new(key);
        let plain = relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if !plain || key.is_empty() || key.starts_with('.') {
            return Err(StorageError::Refused(format!("invalid object key {key:?}")));
        }
        Ok(self.root.join(relative))
    }

    fn upload_dir(&self, upload_id: &str) -> Result<PathBuf, StorageError> {
        if upload_id.is_empty()
            || !upload_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(StorageError::NoSuchUpload);
        }
        Ok(self.root.join(MULTIPART).join(upload_id))
    }

    /// A new temporary file's path.
    fn temporary(&self) -> PathBuf {
        self.root
            .join(TEMPORARY)
            .join(uuid::Uuid::new_v4().simple().to_string())
    }

    /// Moves a synced temporary file to `target`, creating its directory.
    async fn publish(&self, temporary: &Path, target: &Path) -> Result<(), StorageError> {
        if let Some(dir) = target.parent() {
            tokio::fs::create_dir_all(dir).await.map_err(io_err)?;
        }
        tokio::fs::rename(temporary, target).await.map_err(io_err)?;
        if let Some(dir) = target.parent() {
            // The rename itself survives a crash once the directory is synced.
            let dir = dir.to_owned();
            tokio::task::spawn_blocking(move || std::fs::File::open(dir)?.sync_all())
                .await
                .map_err(|e| StorageError::Unavailable(e.to_string()))?
                .map_err(io_err)?;
        }
        Ok(())
    }

    /// Writes `body` to a new synced temporary file; answers its path.
    async fn write_temporary(&self, body: &[u8]) -> Result<PathBuf, StorageError> {
        let path = self.temporary();
        let mut file = tokio::fs::File::create(&path).await.map_err(io_err)?;
        let written = async {
            file.write_all(body).await?;
            file.sync_all().await
        }
        .await;
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(io_err(e));
        }
        Ok(path)
    }
}

/// Local file errors: a missing file is `NotFound`; a full disk, an I/O error
/// may pass, so they are retried.
fn io_err(e: io::Error) -> StorageError {
    match e.kind() {
        io::ErrorKind::NotFound => StorageError::NotFound(e.to_string()),
        io::ErrorKind::PermissionDenied => StorageError::Refused(e.to_string()),
        _ => StorageError::Unavailable(e.to_string()),
    }
}

#[async_trait]
impl ObjectStore for Folder {
    fn describe(&self) -> String {
        format!("the folder {}", self.root.display())
    }

    async fn configure(&self) -> Result<(), StorageError> {
        Ok(())
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        match tokio::fs::metadata(self.path(key)?).await {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(e)),
        }
    }

    async fn read(&self, key: &str, offset: u64) -> Result<ByteStream, StorageError> {
        let mut file = tokio::fs::File::open(self.path(key)?)
            .await
            .map_err(io_err)?;
        file.seek(io::SeekFrom::Start(offset))
            .await
            .map_err(io_err)?;
        let stream = tokio_util::io::ReaderStream::with_capacity(file, 64 * 1024);
        Ok(Box::pin(stream.map(|r| r.map_err(io_err))))
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError> {
        let target = self.path(key)?;
        let temporary = self.write_temporary(&body).await?;
        self.publish(&temporary, &target).await
    }

    async fn put_stream(
        &self,
        key: &str,
        mut body: ByteStream,
        limit: u64,
    ) -> Result<u64, StorageError> {
        let target = self.path(key)?;
        let temporary = self.temporary();
        let mut file = tokio::fs::File::create(&temporary).await.map_err(io_err)?;
        // Removes the temporary file unless it was published, also when this
        // future is dropped mid-upload (the client hung up).
        let guard = RemoveOnDrop(Some(temporary.clone()));
        let mut size = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            size += chunk.len() as u64;
            if size > limit {
                return Err(StorageError::TooLarge { limit });
            }
            file.write_all(&chunk).await.map_err(io_err)?;
        }
        file.sync_all().await.map_err(io_err)?;
        drop(file);
        self.publish(&temporary, &target).await?;
        std::mem::forget(guard);
        Ok(size)
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        match tokio::fs::remove_file(self.path(key)?).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(e)),
        }
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<(), StorageError> {
        // Prefixes end in `/`: a job's directory.
        let dir = self.path(prefix.trim_end_matches('/'))?;
        match tokio::fs::remove_dir_all(dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(e)),
        }
    }

    async fn start_multipart(&self, key: &str) -> Result<String, StorageError> {
        self.path(key)?;
        let id = uuid::Uuid::new_v4().to_string();
        let dir = self.upload_dir(&id)?;
        tokio::fs::create_dir_all(&dir).await.map_err(io_err)?;
        Ok(id)
    }

    async fn put_part(
        &self,
        _key: &str,
        upload_id: &str,
        number: u32,
        body: Bytes,
    ) -> Result<String, StorageError> {
        let dir = self.upload_dir(upload_id)?;
        if !tokio::fs::try_exists(&dir).await.map_err(io_err)? {
            return Err(StorageError::NoSuchUpload);
        }
        let etag = hex::encode(Sha256::digest(&body));
        let temporary = self.write_temporary(&body).await?;
        self.publish(&temporary, &dir.join(format!("part-{number:05}")))
            .await?;
        Ok(etag)
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<(), StorageError> {
        let target = self.path(key)?;
        let dir = self.upload_dir(upload_id)?;
        if !tokio::fs::try_exists(&dir).await.map_err(io_err)? {
            return Err(StorageError::NoSuchUpload);
        }
        let temporary = self.temporary();
        let guard = RemoveOnDrop(Some(temporary.clone()));
        let mut out = tokio::fs::File::create(&temporary).await.map_err(io_err)?;
        for (number, etag) in parts {
            let path = dir.join(format!("part-{number:05}"));
            let mut part = tokio::fs::File::open(&path)
                .await
                .map_err(|e| match e.kind() {
                    io::ErrorKind::NotFound => {
                        StorageError::InvalidPart(format!("part {number} was never uploaded"))
                    }
                    _ => io_err(e),
                })?;
            // Copied in small pieces, hashed as it goes: a part is never held whole.
            let mut hash = Sha256::new();
            let mut piece = vec![0u8; 64 * 1024];
            loop {
                let n = part.read(&mut piece).await.map_err(io_err)?;
                if n == 0 {
                    break;
                }
                hash.update(&piece[..n]);
                out.write_all(&piece[..n]).await.map_err(io_err)?;
            }
            if hex::encode(hash.finalize()) != *etag {
                return Err(StorageError::InvalidPart(format!(
                    "part {number} is not the part whose tag was given"
                )));
            }
        }
        out.sync_all().await.map_err(io_err)?;
        drop(out);
        self.publish(&temporary, &target).await?;
        std::mem::forget(guard);
        tokio::fs::remove_dir_all(&dir).await.map_err(io_err)?;
        Ok(())
    }

    async fn abort_multipart(&self, _key: &str, upload_id: &str) -> Result<(), StorageError> {
        match tokio::fs::remove_dir_all(self.upload_dir(upload_id)?).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(e)),
        }
    }

    async fn list_parts(
        &self,
        _key: &str,
        upload_id: &str,
    ) -> Result<Vec<ListedPart>, StorageError> {
        let dir = self.upload_dir(upload_id)?;
        let mut entries = match tokio::fs::read_dir(&dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StorageError::NoSuchUpload)
            }
            Err(e) => return Err(io_err(e)),
        };
        let mut parts = Vec::new();
        while let Some(entry) = entries.next_entry().await.map_err(io_err)? {
            let name = entry.file_name();
            let Some(number) = name
                .to_str()
                .and_then(|n| n.strip_prefix("part-"))
                .and_then(|n| n.parse().ok())
            else {
                continue;
            };
            // Hashed in pieces: a part is never held whole.
            let mut file = tokio::fs::File::open(entry.path()).await.map_err(io_err)?;
            let (mut hash, mut bytes) = (Sha256::new(), 0u64);
            let mut piece = vec![0u8; 64 * 1024];
            loop {
                let n = file.read(&mut piece).await.map_err(io_err)?;
                if n == 0 {
                    break;
                }
                hash.update(&piece[..n]);
                bytes += n as u64;
            }
            parts.push(ListedPart {
                number,
                etag: hex::encode(hash.finalize()),
                bytes,
            });
        }
        parts.sort_by_key(|p| p.number);
        Ok(parts)
    }

    fn presigns(&self) -> bool {
        false
    }

    async fn presign(
        &self,
        _transfer: Transfer,
        _key: &str,
        _expires: Duration,
        _download_name: Option<&str>,
    ) -> Result<Option<String>, StorageError> {
        Ok(None)
    }
}

/// Removes a file when dropped, unless emptied.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder() -> Folder {
        Folder::new(vfps_testkit::scratch_dir("folder-store")).unwrap()
    }

    async fn read_all(store: &Folder, key: &str, offset: u64) -> Vec<u8> {
        let mut s = store.read(key, offset).await.unwrap();
        let mut out = Vec::new();
        while let Some(c) = s.next().await {
            out.extend_from_slice(&c.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn objects_are_written_read_from_an_offset_and_deleted() {
        let store = folder();
        store
            .put("csv-jobs/a/x", Bytes::from_static(b"hello"))
            .await
            .unwrap();
        assert_eq!(store.size("csv-jobs/a/x").await.unwrap(), Some(5));
        assert_eq!(read_all(&store, "csv-jobs/a/x", 2).await, b"llo");
        store.delete_prefix("csv-jobs/a/").await.unwrap();
        assert_eq!(store.size("csv-jobs/a/x").await.unwrap(), None);
        store.delete("csv-jobs/a/x").await.unwrap();
        assert!(store.path("../etc/passwd").is_err());
        assert!(store.path(".multipart/x").is_err());
    }

    #[tokio::test]
    async fn an_upload_over_the_limit_leaves_nothing() {
        let store = folder();
        let body: ByteStream = Box::pin(futures::stream::iter(vec![
            Ok(Bytes::from_static(b"1234")),
            Ok(Bytes::from_static(b"5678")),
        ]));
        assert_eq!(
            store.put_stream("csv-jobs/b/input.csv", body, 6).await,
            Err(StorageError::TooLarge { limit: 6 })
        );
        assert_eq!(store.size("csv-jobs/b/input.csv").await.unwrap(), None);
        let leftovers = std::fs::read_dir(store.root().join(TEMPORARY))
            .unwrap()
            .count();
        assert_eq!(leftovers, 0);
    }

    #[tokio::test]
    async fn a_multipart_upload_appears_whole_and_a_part_uploaded_twice_keeps_its_tag() {
        let store = folder();
        let key = "csv-jobs/c/output.csv";
        let id = store.start_multipart(key).await.unwrap();
        let one = store
            .put_part(key, &id, 1, Bytes::from_static(b"ab"))
            .await
            .unwrap();
        let again = store
            .put_part(key, &id, 1, Bytes::from_static(b"ab"))
            .await
            .unwrap();
        assert_eq!(one, again);
        assert_eq!(
            store.list_parts(key, &id).await.unwrap(),
            [ListedPart {
                number: 1,
                etag: one.clone(),
                bytes: 2
            }]
        );
        let two = store
            .put_part(key, &id, 2, Bytes::from_static(b"cd"))
            .await
            .unwrap();
        assert_eq!(store.size(key).await.unwrap(), None);
        let wrong = [(1, one.clone()), (2, one.clone())];
        assert!(store.complete_multipart(key, &id, &wrong).await.is_err());
        assert_eq!(store.size(key).await.unwrap(), None);
        store
            .complete_multipart(key, &id, &[(1, one.clone()), (2, two)])
            .await
            .unwrap();
        assert_eq!(read_all(&store, key, 0).await, b"abcd");
        assert_eq!(
            store.complete_multipart(key, &id, &[(1, one)]).await,
            Err(StorageError::NoSuchUpload)
        );
    }
}
