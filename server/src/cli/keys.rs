//! `strata keys`: what an operator or a non-SDK consumer needs to work with
//! stream keys and stored pages offline (docs/FORMATS.md §6–7).
//!
//! Keys are read from `--key` or, better (shell history), from the
//! `STRATA_STREAM_KEY` environment variable. Nothing here writes a key anywhere
//! except `generate`'s standard output.

use std::io::Read;

use base64::Engine as _;
use bytes::Bytes;
use clap::{Args, Subcommand};
use hex::encode as hex;
use strata_segments::keys::{derive_page_key, derive_subkey, fingerprint};
use strata_segments::{open_page, parse_header, PageCipher, StreamEpoch, StreamKey};

#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error("{0}")]
    Key(#[from] strata_segments::KeyError),
    #[error("stream epoch must be 32 hex digits (16 bytes)")]
    Epoch,
    #[error("subkey must be 32 bytes in base64url, base64 or hex")]
    Subkey,
    #[error("no stream key: pass --key or set STRATA_STREAM_KEY")]
    MissingKey,
    #[error("reading the page: {0}")]
    Io(#[from] std::io::Error),
    #[error("input is not hex")]
    Hex,
    #[error("page: {0}")]
    Page(#[from] strata_segments::PageError),
}

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Print a new random stream key (32 bytes, base64url).
    Generate {
        #[arg(long, default_value_t = 1)]
        count: usize,
    },
    /// Print the key fingerprint a stream descriptor stores.
    Fingerprint(KeyAndEpoch),
    /// Print the subkey of one routing key and key version (and its page key).
    Derive {
        #[command(flatten)]
        key: KeyAndEpoch,
        #[arg(long, default_value = "")]
        routing_key: String,
        #[arg(long, default_value_t = 0)]
        key_version: u32,
    },
    /// Decrypt one page (from a file or standard input) and print its records.
    OpenPage {
        /// Stream epoch (hex) of the page's stream incarnation.
        #[arg(long)]
        epoch: String,
        /// Stream key; or set STRATA_STREAM_KEY; or give --subkey instead.
        /// (A base64url key may start with `-`.)
        #[arg(long, allow_hyphen_values = true)]
        key: Option<String>,
        /// The page's routing-key subkey (base64url, base64 or hex).
        #[arg(long, conflicts_with = "key", allow_hyphen_values = true)]
        subkey: Option<String>,
        /// File with the page's bytes ("-" or absent: standard input).
        input: Option<String>,
        /// The input is hex text rather than raw bytes.
        #[arg(long)]
        hex: bool,
        /// Print JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
pub struct KeyAndEpoch {
    /// Stream epoch (hex), as the stream's descriptor shows it.
    #[arg(long)]
    epoch: String,
    /// Stream key (base64url or base64); or set STRATA_STREAM_KEY. (A
    /// base64url key may start with `-`.)
    #[arg(long, allow_hyphen_values = true)]
    key: Option<String>,
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    hex::decode(text).ok()
}

fn epoch(text: &str) -> Result<StreamEpoch, KeysError> {
    let bytes = unhex(text).ok_or(KeysError::Epoch)?;
    Ok(StreamEpoch(bytes.try_into().map_err(|_| KeysError::Epoch)?))
}

fn stream_key(flag: &Option<String>) -> Result<StreamKey, KeysError> {
    let text = match flag {
        Some(k) => k.clone(),
        None => std::env::var("STRATA_STREAM_KEY").map_err(|_| KeysError::MissingKey)?,
    };
    Ok(StreamKey::parse(&text)?)
}

fn subkey(text: &str) -> Result<[u8; 32], KeysError> {
    let from_base64 = StreamKey::parse(text).ok().map(|k| *k.expose());
    from_base64
        .or_else(|| unhex(text).and_then(|b| b.try_into().ok()))
        .ok_or(KeysError::Subkey)
}

pub fn run(command: KeysCommand) -> Result<(), KeysError> {
    match command {
        KeysCommand::Generate { count } => {
            for _ in 0..count {
                let mut bytes = [0u8; 32];
                strata_engine::Entropy::fill(&strata_engine::OsEntropy, &mut bytes);
                println!("{}", StreamKey::from_bytes(bytes).to_base64url());
            }
        }
        KeysCommand::Fingerprint(args) => {
            let key = stream_key(&args.key)?;
            println!("{}", hex(fingerprint(&epoch(&args.epoch)?, &key)));
        }
        KeysCommand::Derive {
            key,
            routing_key,
            key_version,
        } => {
            let epoch = epoch(&key.epoch)?;
            let stream_key = stream_key(&key.key)?;
            let sub = derive_subkey(&epoch, &stream_key, routing_key.as_bytes(), key_version);
            let page = derive_page_key(&epoch, &sub);
            let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            println!("subkey   {}", url.encode(sub.as_slice()));
            println!("page key {}", hex(page.as_slice()));
        }
        KeysCommand::OpenPage {
            epoch: epoch_text,
            key,
            subkey: subkey_text,
            input,
            hex: hex_input,
            json,
        } => {
            let mut raw = Vec::new();
            match input.as_deref() {
                None | Some("-") => {
                    std::io::stdin().read_to_end(&mut raw)?;
                }
                Some(path) => raw = std::fs::read(path)?,
            }
            if hex_input {
                raw = unhex(std::str::from_utf8(&raw).map_err(|_| KeysError::Hex)?)
                    .ok_or(KeysError::Hex)?;
            }
            let page = Bytes::from(raw);
            let header = parse_header(&page)?;
            let epoch = epoch(&epoch_text)?;
            let cipher = match subkey_text {
                Some(text) => PageCipher::from_subkey(epoch, &subkey(&text)?),
                None => PageCipher::new(
                    epoch,
                    &stream_key(&key)?,
                    &header.routing_key,
                    header.key_version,
                ),
            };
            let opened = open_page(&cipher, &page)?;
            print_page(&opened, json);
        }
    }
    Ok(())
}

fn print_page(page: &strata_segments::OpenedPage, json: bool) {
    let h = &page.header;
    let routing_key = String::from_utf8_lossy(&h.routing_key);
    if json {
        for r in &page.records {
            let line = serde_json::json!({
                "offset": r.offset,
                "timestamp_ms": r.timestamp_ms,
                "routing_key": routing_key,
                "key_version": h.key_version,
                "payload_base64": base64::engine::general_purpose::STANDARD.encode(&r.payload),
            });
            println!("{line}");
        }
        return;
    }
    println!(
        "page: offsets {}..{}, {} records, routing key {:?}, key version {}, timestamp {} ms, {}",
        h.first_offset,
        h.end_offset(),
        h.record_count,
        routing_key,
        h.key_version,
        h.timestamp_ms,
        if h.compressed { "zstd" } else { "uncompressed" }
    );
    for r in &page.records {
        match std::str::from_utf8(&r.payload) {
            Ok(text) => println!("{}\t{}\t{}", r.offset, r.timestamp_ms, text.escape_debug()),
            Err(_) => println!(
                "{}\t{}\tbase64:{}",
                r.offset,
                r.timestamp_ms,
                base64::engine::general_purpose::STANDARD.encode(&r.payload)
            ),
        }
    }
}
