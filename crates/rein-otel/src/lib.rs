//! OpenTelemetry export for Rein: one call sends an agent's traces — `invoke_agent`, `chat`,
//! `execute_tool` and a `run_guardrail` span per intervention decision — and its metrics over
//! OTLP to any OpenTelemetry backend (Phoenix, Jaeger, Langfuse, Tempo, Datadog...).
//!
//! Configuration comes from the standard `OTEL_*` environment variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL` = `http/protobuf` or `grpc`
//! (feature `grpc`), `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`,
//! `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` = `none`, `OTEL_SDK_DISABLED`...). The returned guard flushes and shuts the exporters down when dropped.
//!
//! ```no_run
//! # fn main() -> Result<(), rein_otel::Error> {
//! let _otel = rein_otel::init()?; // keep it alive until the program ends
//! // ... build agents and invoke them: their spans and metrics are exported.
//! # Ok(()) }
//! ```
//!
//! With options, or composed with a subscriber of your own:
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt as _;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let otel = rein_otel::Otel::builder()
//!     .service_name("support-bot")
//!     .capture_content(false) // the default: no prompts, responses or tool arguments
//!     .experimental_conventions(true) // gen_ai.security.* on run_guardrail spans
//!     .build()?;
//! let subscriber = tracing_subscriber::registry().with(otel.layer());
//! tracing::subscriber::set_global_default(subscriber)?;
//! # Ok(()) }
//! ```
//!
//! No type of the `opentelemetry*` crates appears in this API, so their frequent breaking
//! releases do not break programs that use it.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{
    Aggregation, Instrument, PeriodicReader, SdkMeterProvider, Stream,
};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

#[cfg(test)]
mod tests;

/// What can fail when setting up or shutting down the export.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting (an `OTEL_*` variable, say) has a value that cannot work.
    #[error("invalid OpenTelemetry setting {name}: {reason}")]
    Config {
        /// The setting.
        name: String,
        /// Why.
        reason: String,
    },
    /// An exporter could not be built.
    #[error("OpenTelemetry exporter: {0}")]
    Exporter(String),
    /// A global `tracing` subscriber is already set ([`OtelBuilder::install`]).
    #[error("a global tracing subscriber is already set: {0}")]
    SubscriberSet(String),
    /// Flushing or shutting down failed (spans may have been lost).
    #[error("OpenTelemetry shutdown: {0}")]
    Shutdown(String),
}

/// The wire protocol of OTLP export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// Protobuf over HTTP (`http/protobuf`, port 4318): the default.
    HttpProtobuf,
    /// gRPC (`grpc`, port 4317; feature `grpc`).
    Grpc,
}

impl Protocol {
    fn from_env() -> Result<Option<Self>, Error> {
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Ok(value) = std::env::var(name) {
                return match value.trim() {
                    "http/protobuf" => Ok(Some(Self::HttpProtobuf)),
                    "grpc" => Ok(Some(Self::Grpc)),
                    other => Err(Error::Config {
                        name: name.to_owned(),
                        reason: format!("'{other}' (supported: http/protobuf, grpc)"),
                    }),
                };
            }
        }
        Ok(None)
    }
}

/// Options of the export; [`Otel::builder`] makes one with the defaults.
#[derive(Debug, Clone, Default)]
pub struct OtelBuilder {
    service_name: Option<String>,
    endpoint: Option<String>,
    protocol: Option<Protocol>,
    capture_content: bool,
    experimental: bool,
    no_metrics: bool,
}

impl OtelBuilder {
    /// The `service.name` resource attribute (default: `OTEL_SERVICE_NAME`, else `rein`).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// The collector's base URL (default: `OTEL_EXPORTER_OTLP_ENDPOINT`, else
    /// `http://localhost:4318` for HTTP, `http://localhost:4317` for gRPC). For HTTP the signal
    /// paths (`/v1/traces`, `/v1/metrics`) are appended.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The protocol (default: `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP/protobuf).
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// Whether metrics are exported (default: yes, unless `OTEL_METRICS_EXPORTER=none`). Some
    /// trace backends (Phoenix, Jaeger) take no metrics.
    pub fn metrics(mut self, on: bool) -> Self {
        self.no_metrics = !on;
        self
    }

    /// Records message content — prompts, responses, tool arguments and results, decision
    /// reasons — as the conventions' opt-in attributes. Off by default: content may carry
    /// personal data or secrets. Process-wide (it sets
    /// [`rein_agent::telemetry::set_capture_content`]).
    pub fn capture_content(mut self, on: bool) -> Self {
        self.capture_content = on;
        self
    }

    /// Adds the draft GenAI guardrail attributes (`gen_ai.security.*`) to `run_guardrail`
    /// spans. Off by default: the draft may still change. Process-wide.
    pub fn experimental_conventions(mut self, on: bool) -> Self {
        self.experimental = on;
        self
    }

    /// Builds the exporters; [`Otel::layer`] connects them to a `tracing` subscriber.
    pub fn build(self) -> Result<Otel, Error> {
        let disabled =
            std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let resource = self.resource();
        let (traces, metrics) = if disabled {
            (
                SdkTracerProvider::builder()
                    .with_resource(resource.clone())
                    .build(),
                meter_provider(resource, None::<opentelemetry_otlp::MetricExporter>),
            )
        } else {
            let (spans, metrics) = self.exporters()?;
            let mut traces = SdkTracerProvider::builder().with_resource(resource.clone());
            if !exporter_off("OTEL_TRACES_EXPORTER") {
                traces = traces.with_batch_exporter(spans);
            }
            // Some trace backends (Phoenix) take no metrics: OTEL_METRICS_EXPORTER=none.
            let metrics =
                (!self.no_metrics && !exporter_off("OTEL_METRICS_EXPORTER")).then_some(metrics);
            (traces.build(), meter_provider(resource, metrics))
        };
        Ok(self.finish(traces, metrics))
    }

    /// Builds the exporters and installs a global `tracing` subscriber that sends to them
    /// (fails if one is set already: then use [`build`](Self::build) and [`Otel::layer`]).
    pub fn install(self) -> Result<Otel, Error> {
        let otel = self.build()?;
        tracing_subscriber::registry()
            .with(otel.layer())
            .try_init()
            .map_err(|e| Error::SubscriberSet(e.to_string()))?;
        Ok(otel)
    }

    fn resource(&self) -> Resource {
        let builder = Resource::builder();
        match &self.service_name {
            Some(name) => builder.with_service_name(name.clone()),
            None if std::env::var_os("OTEL_SERVICE_NAME").is_none() => {
                builder.with_service_name("rein")
            }
            None => builder,
        }
        .build()
    }

    fn exporters(
        &self,
    ) -> Result<
        (
            opentelemetry_otlp::SpanExporter,
            opentelemetry_otlp::MetricExporter,
        ),
        Error,
    > {
        let protocol = match self.protocol {
            Some(p) => p,
            None => Protocol::from_env()?.unwrap_or(Protocol::HttpProtobuf),
        };
        let built = |e: opentelemetry_otlp::ExporterBuildError| Error::Exporter(e.to_string());
        match protocol {
            Protocol::HttpProtobuf => {
                let mut spans = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(http_client()?);
                let mut metrics = opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_http_client(http_client()?);
                if let Some(url) = &self.endpoint {
                    let base = url.trim_end_matches('/');
                    spans = spans.with_endpoint(format!("{base}/v1/traces"));
                    metrics = metrics.with_endpoint(format!("{base}/v1/metrics"));
                }
                Ok((
                    spans.build().map_err(built)?,
                    metrics.build().map_err(built)?,
                ))
            }
            #[cfg(feature = "grpc")]
            Protocol::Grpc => {
                let mut spans = opentelemetry_otlp::SpanExporter::builder().with_tonic();
                let mut metrics = opentelemetry_otlp::MetricExporter::builder().with_tonic();
                if let Some(url) = &self.endpoint {
                    spans = spans.with_endpoint(url.clone());
                    metrics = metrics.with_endpoint(url.clone());
                }
                Ok((
                    spans.build().map_err(built)?,
                    metrics.build().map_err(built)?,
                ))
            }
            #[cfg(not(feature = "grpc"))]
            Protocol::Grpc => Err(Error::Config {
                name: "OTEL_EXPORTER_OTLP_PROTOCOL".into(),
                reason: "grpc needs rein-otel's `grpc` feature".into(),
            }),
        }
    }

    /// The guard over these providers; the agents' switches are set from the options.
    fn finish(self, traces: SdkTracerProvider, metrics: SdkMeterProvider) -> Otel {
        rein_agent::telemetry::set_capture_content(self.capture_content);
        rein_agent::telemetry::set_experimental_conventions(self.experimental);
        rein_agent::telemetry::set_list_recorder(record_list);
        LIVE_GUARDS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        rein_agent::telemetry::set_exporting(true);
        Otel {
            traces,
            metrics,
            done: false,
        }
    }
}

/// Sets a string-array attribute (`gen_ai.response.finish_reasons`) on a span of this layer;
/// `tracing` fields hold single values.
fn record_list(span: &tracing::Span, key: &'static str, values: &[&'static str]) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let values: Vec<opentelemetry::StringValue> = values.iter().map(|v| (*v).into()).collect();
    span.set_attribute(key, opentelemetry::Value::Array(values.into()));
}

/// Whether a signal's exporter is turned off (`OTEL_TRACES_EXPORTER=none`,
/// `OTEL_METRICS_EXPORTER=none`); any other value means OTLP.
fn exporter_off(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim() == "none")
}

/// The OTLP/HTTP client: reqwest's blocking client (the batch processors export from threads
/// of their own, where no async runtime runs), with Rein's rustls set-up and redirect policy
/// (307 and 308 within the origin only: `OTEL_EXPORTER_OTLP_HEADERS` often carry a backend's
/// key, and reqwest's default would send them to any host a redirect names). Built on a thread
/// of its own: reqwest's blocking client may not be created or dropped inside an async
/// runtime.
fn http_client() -> Result<reqwest::blocking::Client, Error> {
    let tls = rein_models::http::tls_config().map_err(|e| Error::Exporter(e.to_string()))?;
    let timeout = export_timeout();
    std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(timeout)
            .redirect(rein_models::http::redirect_policy())
            .build()
    })
    .join()
    .map_err(|_| Error::Exporter("building the HTTP client panicked".into()))?
    .map_err(|e| Error::Exporter(e.to_string()))
}

/// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds; default 10 s).
fn export_timeout() -> Duration {
    std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// The conventions' bucket boundaries of the GenAI client histograms.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// A meter provider with the conventions' units and buckets for the GenAI histograms (the
/// tracing metrics layer creates instruments without them).
fn meter_provider<E>(resource: Resource, exporter: Option<E>) -> SdkMeterProvider
where
    E: opentelemetry_sdk::metrics::exporter::PushMetricExporter,
{
    let mut builder = SdkMeterProvider::builder()
        .with_resource(resource)
        .with_view(genai_view);
    if let Some(exporter) = exporter {
        builder = builder.with_reader(PeriodicReader::builder(exporter).build());
    }
    builder.build()
}

fn genai_view(i: &Instrument) -> Option<Stream> {
    let (unit, buckets) = match i.name() {
        "gen_ai.client.token.usage" => ("{token}", &TOKEN_BUCKETS),
        "gen_ai.client.operation.duration" => ("s", &DURATION_BUCKETS),
        _ => return None,
    };
    Stream::builder()
        .with_unit(unit)
        .with_aggregation(Aggregation::ExplicitBucketHistogram {
            boundaries: buckets.to_vec(),
            record_min_max: true,
        })
        .build()
        .ok()
}

/// The installed export: a guard that flushes and shuts the exporters down when dropped (or on
/// [`shutdown`](Self::shutdown), which reports failures).
#[derive(Debug)]
pub struct Otel {
    traces: SdkTracerProvider,
    metrics: SdkMeterProvider,
    done: bool,
}

impl Otel {
    /// The options, with their defaults.
    pub fn builder() -> OtelBuilder {
        OtelBuilder::default()
    }

    /// The `tracing` layer sending spans and metric events to the exporters: add it to a
    /// subscriber (`tracing_subscriber::registry().with(otel.layer())`). The log events of
    /// `rein_interventions` (the audit's, handler failures: their text may quote input) are left
    /// out: each decision is its `run_guardrail` span. So are the spans and events of the
    /// export's own stack (h2, hyper, tonic, tower, reqwest, rustls, the `opentelemetry*`
    /// crates): exporting them would make each export produce spans to export.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let metrics_target = rein_agent::telemetry::METRICS_TARGET;
        let tracer = self.traces.tracer("rein");
        let spans = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_level(false)
            .with_filter(tracing_subscriber::filter::filter_fn(move |m| {
                m.target() != metrics_target && exported_target(m.target())
            }));
        let metrics = tracing_opentelemetry::MetricsLayer::new(self.metrics.clone()).with_filter(
            tracing_subscriber::filter::filter_fn(move |m| m.target() == metrics_target),
        );
        spans.and_then(metrics)
    }

    /// Exports what is buffered now.
    pub fn flush(&self) -> Result<(), Error> {
        let spans = self.traces.force_flush();
        let metrics = self.metrics.force_flush();
        spans
            .and(metrics)
            .map_err(|e| Error::Shutdown(e.to_string()))
    }

    /// Flushes and shuts the exporters down; spans ended afterwards are dropped.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.close()
    }

    fn close(&mut self) -> Result<(), Error> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        // Export stays on while another guard of this process lives (the first one closed
        // would otherwise turn it off under the others: string-array attributes became strings).
        if LIVE_GUARDS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            rein_agent::telemetry::set_exporting(false);
        }
        let spans = self.traces.shutdown();
        let metrics = self.metrics.shutdown();
        spans
            .and(metrics)
            .map_err(|e| Error::Shutdown(e.to_string()))
    }
}

/// Guards of this process not yet closed.
static LIVE_GUARDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether spans and events of `target` go to the trace exporter: not those of the crates that
/// carry the export (a feedback loop: each export would make spans of its own), nor Rein's
/// intervention logs (content).
fn exported_target(target: &str) -> bool {
    const LEFT_OUT: [&str; 7] = [
        "h2",
        "hyper",
        "hyper_util",
        "tonic",
        "tower",
        "reqwest",
        "rustls",
    ];
    // Called for every span and event (per-layer filters are not cached per callsite): a
    // `char` split, which needs no substring searcher.
    let krate = target.split(':').next().unwrap_or(target);
    // opentelemetry, opentelemetry_sdk, opentelemetry-otlp (their internal logs use the
    // package name), tracing_opentelemetry...
    !(LEFT_OUT.contains(&krate)
        || krate.starts_with("opentelemetry")
        || krate.starts_with("tracing_opentelemetry")
        || krate.starts_with("tower_")
        || krate.starts_with("rein_interventions"))
}

impl Drop for Otel {
    fn drop(&mut self) {
        // Drop cannot report: shutdown() does.
        let _ = self.close();
    }
}

/// For Rein's benchmarks (`xtask bench otel`): the export of [`OtelBuilder::build`] — batch
/// span processor, periodic metric reader, the same layer — with exporters that drop what they
/// get, so what is measured is Rein's and the SDK's work, not a network. Not public API.
#[doc(hidden)]
pub fn __discarding(builder: OtelBuilder) -> Otel {
    let resource = builder.resource();
    let traces = SdkTracerProvider::builder()
        .with_resource(resource.clone())
        .with_batch_exporter(Discard)
        .build();
    builder.finish(traces, meter_provider(resource, Some(Discard)))
}

/// An exporter of spans and metrics that drops them.
#[derive(Debug)]
struct Discard;

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

impl opentelemetry_sdk::metrics::exporter::PushMetricExporter for Discard {
    async fn export(
        &self,
        _metrics: &opentelemetry_sdk::metrics::data::ResourceMetrics,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        opentelemetry_sdk::metrics::Temporality::Cumulative
    }
}

/// Sets up OTLP export from the `OTEL_*` environment variables and installs it as the global
/// `tracing` subscriber: `Otel::builder().install()`. Keep the guard until the program ends.
pub fn init() -> Result<Otel, Error> {
    Otel::builder().install()
}

// The README's example is compiled as a doc test, so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;
#[cfg(doctest)]
#[doc = include_str!("../../../docs/observability.md")]
struct ObservabilityGuide;
