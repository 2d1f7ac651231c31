//! A receiver on 127.0.0.1 of Pyroscope's ingest API and of OTLP/HTTP profiles, plain std:
//! HTTP/1.1 requests read whole (their Content-Length), answered 200, one request per
//! connection. `POST /ingest` is parsed as Pyroscope's handler does (the query's `name` as
//! `SERVICE{k=v,…}`, `from`/`until` as Unix seconds, `format=pprof`, the body a
//! `multipart/form-data` form whose `profile` field is the gzipped pprof); `POST
//! /v1development/profiles` as an OTLP/HTTP receiver does (`application/x-protobuf`, an
//! `ExportProfilesServiceRequest`); `POST /push.v1.PusherService/Push` as Pyroscope's Push
//! API does (a Connect unary call, `application/proto`, a `PushRequest` whose series' labels
//! hold `__name__` and `service_name` and whose samples are gzipped pprofs). It can go down (its port refuses connections) and come
//! back on the same port.

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
};

use oi_trace::{
    agent::push_proto::PushRequest,
    export::{
        otlp::proto::opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest,
        pprof::proto::Profile,
    },
};
use prost::Message as _;

use super::decode;

/// One profile as the receiver understood it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The API it came by: `ingest` or `push`.
    pub via: &'static str,
    pub service: String,
    pub labels: BTreeMap<String, String>,
    pub from: u64,
    pub until: u64,
    pub tenant: Option<String>,
    pub authorization: Option<String>,
    pub profile: Profile,
}

/// Everything the receiver got, understood.
#[derive(Debug, Default)]
pub struct Store {
    pub pyroscope: Vec<Received>,
    pub otlp: Vec<ExportProfilesServiceRequest>,
    /// The OTLP requests' bodies as they came.
    pub otlp_bodies: Vec<Vec<u8>>,
}

pub struct Receiver {
    pub port: u16,
    pub got: Arc<Mutex<Store>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    /// Listens on `port` (0: any free one).
    pub fn start(port: u16, got: Arc<Mutex<Store>>) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the receiver");
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, store) = (stop.clone(), got.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                serve(stream, &store);
            }
        });
        Self {
            port,
            got,
            stop,
            thread: Some(thread),
        }
    }

    /// Goes down: the port refuses connections from now on.
    pub fn stop(mut self) -> Arc<Mutex<Store>> {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept, which then sees the flag and drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.got.clone()
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().pyroscope.clone()
    }

    pub fn otlp(&self) -> Vec<ExportProfilesServiceRequest> {
        self.got.lock().unwrap().otlp.clone()
    }

    pub fn otlp_bodies(&self) -> Vec<Vec<u8>> {
        self.got.lock().unwrap().otlp_bodies.clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop.store(true, Ordering::SeqCst);
            let _ = TcpStream::connect(("127.0.0.1", self.port));
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

fn serve(stream: TcpStream, store: &Mutex<Store>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').unwrap();
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let length: usize = headers
        .get("content-length")
        .expect("a Content-Length")
        .parse()
        .unwrap();
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let (method, target) = {
        let mut w = request_line.split_whitespace();
        (w.next().unwrap().to_string(), w.next().unwrap().to_string())
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let query: BTreeMap<String, String> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect();
    let status = if method == "POST"
        && path == "/ingest"
        && query.get("format").map(String::as_str) == Some("pprof")
    {
        let received = ingest(&query, &headers, &body);
        store.lock().unwrap().pyroscope.push(received);
        "200 OK"
    } else if method == "POST" && path == "/push.v1.PusherService/Push" {
        let received = push(&headers, &body);
        store.lock().unwrap().pyroscope.extend(received);
        "200 OK"
    } else if method == "POST" && path == "/v1development/profiles" {
        assert_eq!(headers["content-type"], "application/x-protobuf");
        let request =
            ExportProfilesServiceRequest::decode(body.as_slice()).expect("an OTLP export request");
        let mut store = store.lock().unwrap();
        store.otlp.push(request);
        store.otlp_bodies.push(body);
        "200 OK"
    } else {
        "404 Not Found"
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let _ = stream.flush();
}

/// What Pyroscope's Push handler takes from the request: one profile per sample of each
/// series, `service_name` and the other labels apart from `__name__` (which must say a heap
/// profile), the time range the profile's own (in seconds, at least one, as for ingest).
fn push(headers: &BTreeMap<String, String>, body: &[u8]) -> Vec<Received> {
    assert_eq!(headers["content-type"], "application/proto");
    assert_eq!(headers["connect-protocol-version"], "1");
    let request = PushRequest::decode(body).expect("a PushRequest");
    let mut out = Vec::new();
    for series in request.series {
        let mut labels: BTreeMap<String, String> = series
            .labels
            .into_iter()
            .map(|l| (l.name, l.value))
            .collect();
        assert_eq!(labels.remove("__name__").as_deref(), Some("memory"));
        let service = labels.remove("service_name").expect("a service_name");
        for sample in series.samples {
            assert_eq!(sample.id.len(), 36, "a UUID: {}", sample.id);
            let profile = decode(&sample.raw_profile);
            let from = (profile.time_nanos / 1_000_000_000) as u64;
            let until = ((profile.time_nanos + profile.duration_nanos) / 1_000_000_000) as u64;
            out.push(Received {
                via: "push",
                service: service.clone(),
                labels: labels.clone(),
                from,
                until: until.max(from + 1),
                tenant: headers.get("x-scope-orgid").cloned(),
                authorization: headers.get("authorization").cloned(),
                profile,
            });
        }
    }
    out
}

/// What Pyroscope's ingest handler takes from the request.
fn ingest(
    query: &BTreeMap<String, String>,
    headers: &BTreeMap<String, String>,
    body: &[u8],
) -> Received {
    let (service, labels) = parse_name(&query["name"]);
    let content_type = &headers["content-type"];
    let boundary = content_type
        .strip_prefix("multipart/form-data; boundary=")
        .unwrap_or_else(|| panic!("a multipart form, not {content_type}"));
    let profile = form_field(body, boundary, "profile").expect("a profile field");
    Received {
        via: "ingest",
        service,
        labels,
        from: query["from"].parse().unwrap(),
        until: query["until"].parse().unwrap(),
        tenant: headers.get("x-scope-orgid").cloned(),
        authorization: headers.get("authorization").cloned(),
        profile: decode(&profile),
    }
}

/// `SERVICE{k=v,…}` as Pyroscope's label-set parser reads it.
pub fn parse_name(name: &str) -> (String, BTreeMap<String, String>) {
    let (service, rest) = name.split_once('{').expect("SERVICE{…}");
    let inner = rest.strip_suffix('}').expect("ends with }");
    let labels = inner
        .split(',')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("k=v");
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    (service.trim().to_string(), labels)
}

/// The content of form field `name` of a multipart body.
fn form_field(body: &[u8], boundary: &str, name: &str) -> Option<Vec<u8>> {
    let delimiter = format!("--{boundary}");
    let d = delimiter.as_bytes();
    let mut starts = Vec::new();
    let mut i = 0;
    while i + d.len() <= body.len() {
        if &body[i..i + d.len()] == d {
            starts.push(i);
            i += d.len();
        } else {
            i += 1;
        }
    }
    for pair in starts.windows(2) {
        let part = &body[pair[0] + d.len()..pair[1]];
        let head_end = part.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&part[..head_end]);
        if head.contains(&format!("name=\"{name}\"")) {
            let content = &part[head_end + 4..];
            return Some(content.strip_suffix(b"\r\n").unwrap_or(content).to_vec());
        }
    }
    None
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}
