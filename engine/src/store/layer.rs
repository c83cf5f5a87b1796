//! One wrapper type for every store decorator: [`Layered`] implements
//! `ObjectStore` by routing each call through a [`StoreLayer`], whose methods
//! default to plain delegation. A decorator (latency, counting, the local
//! compare-and-swap, fault injection) overrides only the calls it changes.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// The kinds of calls a layer can observe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    Put,
    Get,
    Head,
    List,
    Delete,
    Copy,
}

/// Hooks of a store decorator. Every method receives the inner store.
#[async_trait]
pub trait StoreLayer: Send + Sync + fmt::Debug + 'static {
    /// Runs before every call (latency, counting, fault injection). An error
    /// fails the call without reaching the inner store.
    async fn before(&self, _op: StoreOp, _location: Option<&Path>) -> Result<()> {
        Ok(())
    }

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        inner.put_opts(location, payload, opts).await
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> Result<GetResult> {
        inner.get_opts(location, options).await
    }

    /// Deletes one object (after `before` allowed the call).
    async fn delete(&self, inner: &Arc<dyn ObjectStore>, location: &Path) -> Result<()> {
        inner.delete(location).await
    }

    /// Lists objects under `prefix` (after `offset`, when given), once
    /// `before` allowed the call.
    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        inner_listing(inner, prefix, offset)
    }
}

/// The inner store's listing under `prefix` (after `offset`, when given):
/// what [`StoreLayer::list`] does unless a layer changes it, for layers that
/// change what it shows.
pub fn inner_listing(
    inner: &Arc<dyn ObjectStore>,
    prefix: Option<&Path>,
    offset: Option<&Path>,
) -> BoxStream<'static, Result<ObjectMeta>> {
    match offset {
        Some(offset) => inner.list_with_offset(prefix, offset),
        None => inner.list(prefix),
    }
}

/// A store decorated by a layer.
pub struct Layered<L: StoreLayer> {
    inner: Arc<dyn ObjectStore>,
    layer: Arc<L>,
}

impl<L: StoreLayer> Layered<L> {
    pub fn new(inner: Arc<dyn ObjectStore>, layer: L) -> Self {
        Layered {
            inner,
            layer: Arc::new(layer),
        }
    }

    pub fn layer(&self) -> &Arc<L> {
        &self.layer
    }

    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }
}

impl<L: StoreLayer> Layered<L> {
    /// A listing that asks `before` first, then the layer's `list`.
    fn listing(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let inner = self.inner.clone();
        let layer = self.layer.clone();
        let prefix = prefix.cloned();
        let offset = offset.cloned();
        futures::stream::once(async move {
            match layer.before(StoreOp::List, prefix.as_ref()).await {
                Ok(()) => layer.list(&inner, prefix.as_ref(), offset.as_ref()),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }
}

impl<L: StoreLayer> fmt::Debug for Layered<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Layered({:?}, {})", self.layer, self.inner)
    }
}

impl<L: StoreLayer> fmt::Display for Layered<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}({})", self.layer, self.inner)
    }
}

#[async_trait]
impl<L: StoreLayer> ObjectStore for Layered<L> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.layer.before(StoreOp::Put, Some(location)).await?;
        self.layer
            .put_opts(&self.inner, location, payload, opts)
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.layer.before(StoreOp::Put, Some(location)).await?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head {
            StoreOp::Head
        } else {
            StoreOp::Get
        };
        self.layer.before(op, Some(location)).await?;
        self.layer.get_opts(&self.inner, location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.layer.before(StoreOp::Get, Some(location)).await?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let inner = self.inner.clone();
        let layer = self.layer.clone();
        locations
            .then(move |location| {
                let inner = inner.clone();
                let layer = layer.clone();
                async move {
                    let location = location?;
                    layer.before(StoreOp::Delete, Some(&location)).await?;
                    layer.delete(&inner, &location).await?;
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listing(prefix, None)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listing(prefix, Some(offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.layer.before(StoreOp::List, prefix).await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.layer.before(StoreOp::Copy, Some(to)).await?;
        self.inner.copy_opts(from, to, options).await
    }
}
