//! `oi-trace agent`: options of the continuous mode. Parsing and validation only.

use std::{path::PathBuf, time::Duration};

use clap::{ArgGroup, Args, ValueEnum};

use super::profiler::parse_time;

/// Profile processes continuously and deliver one pprof profile per target and interval, to
/// files, to Pyroscope, to an OTLP endpoint (experimental), or several.
///
/// Every --interval the agent takes, for each target, the allocations made during that interval
/// (alloc_objects, alloc_space) and what they still hold at its end (inuse_objects,
/// inuse_space), per stack, with the C++ type and the classes as leaf frames, exactly as
/// `oi-trace allocs --pprof` writes them, with the interval as the profile's time and
/// duration. Allocations are sampled by default (--sample-bytes); `--every 1` counts every one.
///
/// Delivery never holds profiling up: profiles for the network wait in a bounded queue
/// (--queue), failed sends are retried with exponential backoff, and what does not fit is
/// dropped and counted (a status line on stderr every interval, a summary at the end).
/// A target that exits is dropped with one line on stderr; the others go on. The agent runs
/// until SIGINT or SIGTERM (or --duration), sends the last partial interval, and leaves every
/// target running, untraced. Details: docs/agent.md.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("targets").required(true).multiple(true).args(["pids", "cgroups", "target"])))]
#[command(after_help = "\
Examples:
  oi-trace agent --pid 4242 --pprof-dir /var/lib/oi-trace/profiles
      a heap profile of pid 4242 every 15 s, the last 96 kept (go tool pprof -raw FILE)
  oi-trace agent --pid 4242 --pid 4343 --pyroscope-url http://pyroscope:4040 \\
                 --service-name shop --label env=prod
      both processes to Pyroscope's ingest API, as shop{pid=…,env=prod}
  oi-trace agent --pid 4242 --pyroscope-url https://profiles.example.com \\
                 --tenant-id team-a --bearer-token-file /etc/oi-trace/token
      a multi-tenant Pyroscope (X-Scope-OrgID) behind bearer authentication
  oi-trace agent --pid 4242 --every 1 --interval 5s --duration 1m --pprof-dir out
      every allocation counted, exactly, in twelve 5 s profiles
  oi-trace agent --target all-containers --pyroscope-url http://pyroscope:4040
      every container of the node, each one target, labelled with its container id, and
      pod UID and QoS class under kubepods; containers that start later are picked up
  oi-trace agent --pid 4242 --otlp-endpoint http://collector:4318
      OTLP profiles (experimental) to an OpenTelemetry Collector's OTLP/HTTP receiver

Exit status: 0 the agent ran and stopped, 1 it failed while running, 2 bad usage or input.")]
pub struct AgentArgs {
    /// Profile this process (all of its threads); repeat for several.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<i32>,

    /// Profile every process of this cgroup v2 directory and below it, now and later, as one
    /// target (labels cgroup, and container_id, pod_uid, qos when the path names them); repeat
    /// for several.
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<PathBuf>,

    /// `all-containers`: every container cgroup under --cgroup-root (a directory named by a
    /// 64-hex-digit container id: docker, containerd, CRI-O, podman; kubepods paths of both
    /// cgroup drivers), each one target; containers that start later are picked up at the
    /// next interval, and ones left without a process are dropped.
    #[arg(long, value_enum, value_name = "WHICH")]
    pub target: Option<AgentTarget>,

    /// Where --target all-containers looks for containers; default: the cgroup2 mount.
    #[arg(long, value_name = "PATH", requires = "target")]
    pub cgroup_root: Option<PathBuf>,

    /// What to profile. Only `allocs` is built so far.
    #[arg(long, value_enum, default_value_t = AgentProfile::Allocs)]
    pub profile: AgentProfile,

    /// One profile per target every TIME (`15s`, `1m`).
    #[arg(long, value_name = "TIME", value_parser = parse_time, default_value = "15s")]
    pub interval: Duration,

    /// Stop after this long; default: until SIGINT or SIGTERM.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub duration: Option<Duration>,

    /// Take on average one allocation per B bytes allocated (an allocation of n < B bytes with
    /// probability n / B, standing for B / n allocations and B bytes); the profiles hold these
    /// estimates, as Go's and tcmalloc's heap profiles do. Ignored with --every.
    #[arg(long, value_name = "B", default_value_t = 512 * 1024)]
    pub sample_bytes: u64,

    /// Take every Nth allocation instead of sampling by bytes; `--every 1` counts every
    /// allocation exactly (most costly on busy processes).
    #[arg(long, value_name = "N")]
    pub every: Option<u64>,

    /// Most live blocks the kernel keeps per target; allocations beyond are counted as dropped.
    #[arg(long, value_name = "N", default_value_t = 262_144)]
    pub max_live: u32,

    /// Most distinct allocating stacks the kernel keeps per target.
    #[arg(long, value_name = "N", default_value_t = 16_384)]
    pub max_stacks: u32,

    /// Write each profile to DIR as SERVICE-PID-UNIXMS.pb.gz (gzipped profile.proto).
    #[arg(long, value_name = "DIR", help_heading = "Delivery")]
    pub pprof_dir: Option<PathBuf>,

    /// In --pprof-dir, keep the newest N profiles of each target; older ones are removed.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 96,
        help_heading = "Delivery"
    )]
    pub pprof_keep: usize,

    /// Send each profile to Pyroscope's ingest API at URL (`http://host:4040`; also an Alloy
    /// `pyroscope.receive_http`): POST URL/ingest?name=SERVICE{LABELS}&from=…&until=…&format=pprof.
    #[arg(long, value_name = "URL", help_heading = "Delivery")]
    pub pyroscope_url: Option<String>,

    /// Which of Pyroscope's write APIs --pyroscope-url receives the profiles by: `ingest`
    /// (POST /ingest, a multipart form: every Pyroscope version and Alloy's receive_http) or
    /// `push` (POST /push.v1.PusherService/Push, protobuf: Pyroscope 1.0 and later, as Alloy's
    /// pyroscope.write sends).
    #[arg(
        long,
        value_name = "API",
        value_enum,
        default_value = "ingest",
        help_heading = "Delivery"
    )]
    pub pyroscope_api: PyroscopeApi,

    /// EXPERIMENTAL: also send each profile as OTLP profiles (the OpenTelemetry profiles
    /// signal, still Alpha; opentelemetry-proto v1.11.0's v1development messages) over HTTP:
    /// POST URL/v1development/profiles, protobuf. Default: $OTEL_EXPORTER_OTLP_ENDPOINT when
    /// set. The signal's messages may change: check your collector's version (docs/agent.md).
    #[arg(long, value_name = "URL", help_heading = "Delivery")]
    pub otlp_endpoint: Option<String>,

    /// The service_name of every target (Pyroscope's application name); default: the
    /// process's command name (/proc/PID/comm).
    #[arg(long, value_name = "NAME", help_heading = "Labels")]
    pub service_name: Option<String>,

    /// An extra label on every profile (`env=prod`); repeat for several. Names: letters,
    /// digits, `_` and `.`.
    #[arg(long = "label", value_name = "K=V", help_heading = "Labels")]
    pub labels: Vec<String>,

    /// Send this tenant in the X-Scope-OrgID header (multi-tenant Pyroscope, Grafana Cloud),
    /// to Pyroscope and to the OTLP endpoint.
    #[arg(long, value_name = "ID", help_heading = "Delivery")]
    pub tenant_id: Option<String>,

    /// Send `Authorization: Bearer TOKEN` to Pyroscope and to the OTLP endpoint, TOKEN read
    /// from FILE at start (trailing newline removed).
    #[arg(long, value_name = "FILE", help_heading = "Delivery")]
    pub bearer_token_file: Option<PathBuf>,

    /// Most profiles waiting for the network, per backend; a profile that finds the queue full pushes the
    /// oldest one out, counted as dropped.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 64,
        help_heading = "Delivery"
    )]
    pub queue: usize,

    /// The longest wait between two attempts to send the profile at the head of the queue; the
    /// waits start at 250 ms and double up to this.
    #[arg(long, value_name = "TIME", value_parser = parse_time, default_value = "30s",
          help_heading = "Delivery")]
    pub retry_max: Duration,

    /// Give up on a send after this long (connect, send and answer).
    #[arg(long, value_name = "TIME", value_parser = parse_time, default_value = "10s",
          help_heading = "Delivery")]
    pub send_timeout: Duration,

    /// Print the eBPF programs' decisions (aya-log) and every delivery on stderr.
    #[arg(short, long)]
    pub verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentTarget {
    AllContainers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentProfile {
    Allocs,
}

/// Which of Pyroscope's write APIs receives the profiles (`--pyroscope-api`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PyroscopeApi {
    /// `POST /ingest`, a multipart form (every Pyroscope version, Alloy's receive_http).
    Ingest,
    /// `POST /push.v1.PusherService/Push`, protobuf (Pyroscope 1.0 and later).
    Push,
}
