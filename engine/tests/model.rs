//! Model test: random operations over several streams, each answered by the
//! engine and by a plain in-memory model written independently of it; every
//! answer and every read must agree, including across re-opens of the shard.
//! Appends carry routing keys; reads of one key must return exactly that key's
//! records, at their offsets, and never stall.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use proptest::prelude::*;
use strata_engine::{
    AppendKind, AppendRequest, CreateAck, EngineEnv, EngineError, InstanceId, ProducerClaim,
    ReadLimits, Shard, ShardConfig, ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

const STREAMS: usize = 3;
/// Routing keys appends use; reads filter by one or read all.
const ROUTING_KEYS: [&[u8]; 3] = [b"", b"a", b"bb"];

#[derive(Debug, Clone)]
enum Op {
    Create {
        stream: usize,
        stale: bool,
    },
    Append {
        stream: usize,
        records: usize,
        producer: Option<(u8, u64, u64)>,
        stream_seq: Option<u8>,
        close: bool,
        /// The routing key (`ROUTING_KEYS[key]`).
        key: usize,
    },
    Delete {
        stream: usize,
    },
    Read {
        stream: usize,
        from_fraction: u8,
        /// Records of one routing key only, or all.
        key: Option<usize>,
    },
    Reopen,
    /// Moves everything durable into a segment (reads then span both tiers).
    Seal,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..STREAMS, prop::bool::weighted(0.1)).prop_map(|(stream, stale)| Op::Create { stream, stale }),
        8 => (
            0..STREAMS,
            0usize..4,
            prop::option::weighted(0.4, (0u8..2, 0u64..3, 0u64..5)),
            prop::option::weighted(0.2, 0u8..6),
            prop::bool::weighted(0.08),
            0..ROUTING_KEYS.len(),
        )
            .prop_map(|(stream, records, producer, stream_seq, close, key)| Op::Append {
                stream,
                records,
                producer,
                stream_seq,
                close,
                key,
            }),
        1 => (0..STREAMS).prop_map(|stream| Op::Delete { stream }),
        3 => (0..STREAMS, any::<u8>(), prop::option::of(0..ROUTING_KEYS.len()))
            .prop_map(|(stream, from_fraction, key)| Op::Read { stream, from_fraction, key }),
        1 => Just(Op::Reopen),
        2 => Just(Op::Seal),
    ]
}

#[derive(Debug, Clone, Default)]
struct ModelProducer {
    epoch: u64,
    seq: u64,
    first: u64,
}

#[derive(Debug, Clone)]
struct ModelStream {
    incarnation: u64,
    /// Each record with its routing key's index.
    records: Vec<(usize, Bytes)>,
    closed: bool,
    deleted: bool,
    producers: BTreeMap<String, ModelProducer>,
    stream_seq: Option<Vec<u8>>,
}

#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Appended { first: u64, next: u64, closed: bool },
    Duplicate { first: u64, next: u64 },
    AlreadyClosed { next: u64 },
    Error(EngineError),
}

struct Model {
    streams: Vec<Option<ModelStream>>,
    /// Highest incarnation ever used per stream.
    incarnations: Vec<u64>,
}

impl Model {
    fn live(&self, i: usize) -> Option<&ModelStream> {
        self.streams[i].as_ref().filter(|s| !s.deleted)
    }

    fn append(
        &mut self,
        i: usize,
        payloads: &[Bytes],
        key: usize,
        producer: Option<&ProducerClaim>,
        stream_seq: Option<&[u8]>,
        close: bool,
    ) -> Expect {
        if payloads.is_empty() && !close {
            return Expect::Error(EngineError::EmptyAppend);
        }
        let Some(s) = self.streams[i].as_mut().filter(|s| !s.deleted) else {
            return Expect::Error(EngineError::StreamNotFound);
        };
        let tail = s.records.len() as u64;
        if let Some(claim) = producer {
            if let Some(p) = s.producers.get(&claim.id) {
                if claim.epoch == p.epoch && claim.seq <= p.seq {
                    return Expect::Duplicate {
                        first: p.first,
                        next: tail,
                    };
                }
            }
        }
        if s.closed {
            return if payloads.is_empty() && producer.is_none() {
                Expect::AlreadyClosed { next: tail }
            } else {
                Expect::Error(EngineError::StreamClosed { next_offset: tail })
            };
        }
        if let Some(claim) = producer {
            match s.producers.get(&claim.id) {
                None if claim.seq != 0 => {
                    return Expect::Error(EngineError::ProducerSeqGap {
                        expected: 0,
                        received: claim.seq,
                    })
                }
                Some(p) if claim.epoch < p.epoch => {
                    return Expect::Error(EngineError::ProducerStaleEpoch {
                        current_epoch: p.epoch,
                    })
                }
                Some(p) if claim.epoch > p.epoch && claim.seq != 0 => {
                    return Expect::Error(EngineError::ProducerNewEpochNeedsSeqZero)
                }
                Some(p) if claim.epoch == p.epoch && claim.seq > p.seq + 1 => {
                    return Expect::Error(EngineError::ProducerSeqGap {
                        expected: p.seq + 1,
                        received: claim.seq,
                    })
                }
                _ => {}
            }
        }
        if let Some(seq) = stream_seq {
            if s.stream_seq.as_deref().is_some_and(|last| last >= seq) {
                return Expect::Error(EngineError::StreamSeqConflict);
            }
            s.stream_seq = Some(seq.to_vec());
        }
        if let Some(claim) = producer {
            s.producers.insert(
                claim.id.clone(),
                ModelProducer {
                    epoch: claim.epoch,
                    seq: claim.seq,
                    first: tail,
                },
            );
        }
        s.records.extend(payloads.iter().map(|p| (key, p.clone())));
        if close {
            s.closed = true;
        }
        Expect::Appended {
            first: tail,
            next: s.records.len() as u64,
            closed: close,
        }
    }
}

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([5; 16]),
        StreamKey::from_bytes([6; 32]),
    ))
}

async fn open(store: &Arc<dyn ObjectStore>, instance: u8) -> Shard {
    Shard::open(
        EngineEnv::production(store.clone()),
        ShardName::new("model").unwrap(),
        InstanceId([instance; 16]),
        ShardConfig {
            // Seals also start on their own, between any two operations.
            seal_objects: 4,
            max_index_runs: 3,
            gc_grace: std::time::Duration::ZERO,
            ..ShardConfig::default()
        },
    )
    .await
    .expect("open")
}

fn stream_ref(i: usize, incarnation: u64) -> StreamRef {
    StreamRef {
        id: [i as u8 + 1; 16],
        incarnation,
    }
}

/// Reads from `from` to the tail in small pages (of one routing key's records
/// when `key` is given): every page makes progress, offsets only grow.
async fn read_all(
    shard: &Shard,
    s: &StreamRef,
    from: u64,
    key: Option<usize>,
) -> Result<Vec<(u64, Bytes)>, EngineError> {
    let mut out: Vec<(u64, Bytes)> = Vec::new();
    let mut at = from;
    for _ in 0..10_000 {
        let batch = shard
            .read(
                s,
                at,
                ReadLimits {
                    max_records: 3,
                    max_bytes: 64,
                },
                &cipher(),
                key.map(|k| ROUTING_KEYS[k]),
            )
            .await?;
        let done = batch.up_to_date();
        assert!(
            done || batch.next_offset > at || !batch.records.is_empty(),
            "a read from {at} made no progress"
        );
        for r in batch.records {
            assert!(r.offset >= at, "offsets only grow");
            at = r.offset + 1;
            out.push((r.offset, r.payload));
        }
        assert!(
            batch.next_offset >= at,
            "the next offset is past the records"
        );
        at = batch.next_offset;
        if done {
            return Ok(out);
        }
    }
    panic!("a read of {s:?} from {from} never caught up");
}

/// What the model holds from `from` on, of `key` (or all keys).
fn expected(m: &ModelStream, from: u64, key: Option<usize>) -> Vec<(u64, Bytes)> {
    m.records
        .iter()
        .enumerate()
        .skip(from as usize)
        .filter(|(_, (k, _))| key.is_none_or(|want| want == *k))
        .map(|(i, (_, b))| (i as u64, b.clone()))
        .collect()
}

async fn run(ops: Vec<Op>) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut instance = 1u8;
    let mut shard = open(&store, instance).await;
    let mut model = Model {
        streams: vec![None; STREAMS],
        incarnations: vec![0; STREAMS],
    };
    let mut counter = 0u64;
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Create { stream, stale } => {
                let (incarnation, expect) = match model.live(stream) {
                    Some(s) if stale && s.incarnation > 1 => {
                        (s.incarnation - 1, Err(EngineError::StaleIncarnation))
                    }
                    Some(s) => (s.incarnation, Ok(CreateAck::AlreadyExists)),
                    None => (model.incarnations[stream] + 1, Ok(CreateAck::Created)),
                };
                let got = shard
                    .create_stream(stream_ref(stream, incarnation), &cipher())
                    .await;
                assert_eq!(got, expect, "step {step}: create");
                if got == Ok(CreateAck::Created) {
                    model.incarnations[stream] = incarnation;
                    model.streams[stream] = Some(ModelStream {
                        incarnation,
                        records: Vec::new(),
                        closed: false,
                        deleted: false,
                        producers: BTreeMap::new(),
                        stream_seq: None,
                    });
                }
            }
            Op::Append {
                stream,
                records,
                producer,
                stream_seq,
                close,
                key,
            } => {
                let incarnation = model.streams[stream].as_ref().map_or(1, |s| s.incarnation);
                let payloads: Vec<Bytes> = (0..records)
                    .map(|_| {
                        counter += 1;
                        Bytes::from(format!("r{counter}"))
                    })
                    .collect();
                let claim = producer.map(|(id, epoch, seq)| ProducerClaim {
                    id: format!("p{id}"),
                    epoch,
                    seq,
                    digest: [0; 16],
                });
                let seq = stream_seq.map(|n| vec![b'0' + n]);
                let mut request =
                    AppendRequest::new(stream_ref(stream, incarnation), cipher(), payloads.clone());
                request.producer = claim.clone();
                request.stream_seq = seq.clone().map(Bytes::from);
                request.close = close;
                request.routing_key = Bytes::from_static(ROUTING_KEYS[key]);
                let expect = model.append(
                    stream,
                    &payloads,
                    key,
                    claim.as_ref(),
                    seq.as_deref(),
                    close,
                );
                let got = match shard.append(request).await {
                    Ok(ack) => match ack.kind {
                        AppendKind::Appended => Expect::Appended {
                            first: ack.first_offset,
                            next: ack.next_offset,
                            closed: ack.closed,
                        },
                        AppendKind::Duplicate(_) => Expect::Duplicate {
                            first: ack.first_offset,
                            next: ack.next_offset,
                        },
                        AppendKind::AlreadyClosed => Expect::AlreadyClosed {
                            next: ack.next_offset,
                        },
                    },
                    Err(e) => Expect::Error(e),
                };
                assert_eq!(got, expect, "step {step}: append");
            }
            Op::Delete { stream } => {
                let incarnation = model.streams[stream].as_ref().map_or(1, |s| s.incarnation);
                let expect = match model.live(stream) {
                    Some(_) => Ok(()),
                    None => Err(EngineError::StreamNotFound),
                };
                let got = shard.delete_stream(stream_ref(stream, incarnation)).await;
                assert_eq!(got, expect, "step {step}: delete");
                if let Some(s) = model.streams[stream].as_mut() {
                    s.deleted = true;
                }
            }
            Op::Read {
                stream,
                from_fraction,
                key,
            } => {
                let incarnation = model.streams[stream].as_ref().map_or(1, |s| s.incarnation);
                let s = stream_ref(stream, incarnation);
                match model.live(stream) {
                    Some(m) => {
                        let from = (m.records.len() * from_fraction as usize / 255) as u64;
                        let got = read_all(&shard, &s, from, key).await.expect("read");
                        assert_eq!(got, expected(m, from, key), "step {step}: read");
                        let info = shard.stream_info(&s).expect("live");
                        assert_eq!(info.tail.next_offset, m.records.len() as u64);
                    }
                    None => assert_eq!(
                        read_all(&shard, &s, 0, key).await.unwrap_err(),
                        EngineError::StreamNotFound,
                        "step {step}: read of a missing stream"
                    ),
                }
            }
            Op::Seal => shard.seal_now().await.expect("seal"),
            Op::Reopen => {
                shard.shutdown().await;
                instance += 1;
                shard = open(&store, instance).await;
                for (i, m) in model.streams.iter().enumerate() {
                    if let Some(m) = m.as_ref().filter(|m| !m.deleted) {
                        let got = read_all(&shard, &stream_ref(i, m.incarnation), 0, None)
                            .await
                            .unwrap();
                        assert_eq!(
                            got,
                            expected(m, 0, None),
                            "step {step}: stream {i} after re-open"
                        );
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(run(ops));
    }
}
