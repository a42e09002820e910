//! lapin against amqprs on agentd's publishing pattern (issue 13: "measure lapin against the
//! alternatives on the same bench before deciding").
//!
//! A step of agentd publishes its events (about four per recursion, ~450 bytes of JSON each,
//! persistent, with a content type, a type, a message id and a `task_id` header) on the
//! worker's one confirm-mode channel and then waits for their confirms. This program does the
//! same through each client against the same RabbitMQ: `--concurrency` publishers share one
//! channel (50 at once, or 1 for one task at a time) and send `--batches` batches in all, to a
//! fanout exchange with one bound queue, as agentd's event exchange has subscribers. The two
//! clients alternate for `--rounds` rounds so both see the same host load, and one JSON line
//! per client gives the medians: events per second, the batch's publish → last confirm time,
//! and the CPU per event of this process and of the broker (from `/proc`, clock ticks).
//!
//! ```sh
//! cargo run --release --manifest-path tools/amqp-client-bench/Cargo.toml -- --concurrency 50
//! ```

mod clients;
mod cpu;

use anyhow::Context;
use clients::{AmqprsClient, Client, Event, LapinClient};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run, from the command line.
struct Options {
    url: String,
    batches: usize,
    batch_size: usize,
    concurrency: usize,
    rounds: usize,
}

impl Options {
    fn parse() -> anyhow::Result<Self> {
        let mut options = Self {
            url: "amqp://guest:guest@127.0.0.1:5672".into(),
            batches: 20_000,
            batch_size: 4,
            concurrency: 50,
            rounds: 3,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--url" => options.url = value,
                "--batches" => options.batches = value.parse()?,
                "--batch-size" => options.batch_size = value.parse()?,
                "--concurrency" => options.concurrency = value.parse()?,
                "--rounds" => options.rounds = value.parse()?,
                other => anyhow::bail!(
                    "unknown option {other}; options: --url, --batches, --batch-size, --concurrency, --rounds"
                ),
            }
        }
        anyhow::ensure!(
            options.concurrency > 0 && options.batches >= options.concurrency,
            "--batches must be at least --concurrency, which must be positive"
        );
        Ok(options)
    }
}

/// The figures of one client in one round.
#[derive(Clone, Copy)]
struct Round {
    events_per_s: f64,
    batch_ms_p50: f64,
    batch_ms_p99: f64,
    client_cpu_us_per_event: f64,
    broker_cpu_us_per_event: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = Options::parse()?;
    let broker_pid = cpu::broker_pid();
    if broker_pid.is_none() {
        eprintln!("[amqp-client-bench] no beam.smp process found: broker CPU is reported as 0");
    }
    let events: Arc<Vec<Event>> = Arc::new((0..options.batch_size).map(Event::sample).collect());
    let clients: Vec<(&str, Arc<dyn Client>)> = vec![
        ("lapin", Arc::new(LapinClient::connect(&options.url).await?)),
        (
            "amqprs",
            Arc::new(AmqprsClient::connect(&options.url).await?),
        ),
    ];
    // One short warm-up per client (connections, the exchange, allocator pools).
    for (_, client) in &clients {
        run(
            client.clone(),
            &events,
            options.concurrency,
            options.concurrency * 10,
            broker_pid,
        )
        .await?;
    }
    let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); clients.len()];
    for round in 0..options.rounds {
        for (index, (name, client)) in clients.iter().enumerate() {
            let figures = run(
                client.clone(),
                &events,
                options.concurrency,
                options.batches,
                broker_pid,
            )
            .await?;
            eprintln!(
                "[amqp-client-bench] round {} {name}: {:.0} events/s, batch p50 {:.3} ms",
                round + 1,
                figures.events_per_s,
                figures.batch_ms_p50
            );
            rounds[index].push(figures);
        }
    }
    for ((name, client), figures) in clients.iter().zip(&rounds) {
        let median = |pick: fn(&Round) -> f64| {
            let mut values: Vec<f64> = figures.iter().map(pick).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let line = serde_json::json!({
            "client": name,
            "concurrency": options.concurrency,
            "batch_size": options.batch_size,
            "batches": options.batches,
            "rounds": options.rounds,
            "events_per_s": median(|r| r.events_per_s).round(),
            "batch_ms_p50": round3(median(|r| r.batch_ms_p50)),
            "batch_ms_p99": round3(median(|r| r.batch_ms_p99)),
            "client_cpu_us_per_event": round3(median(|r| r.client_cpu_us_per_event)),
            "broker_cpu_us_per_event": round3(median(|r| r.broker_cpu_us_per_event)),
        });
        println!("{line}");
        client.close().await;
    }
    Ok(())
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// `concurrency` publishers send `batches` batches in all through `client`.
async fn run(
    client: Arc<dyn Client>,
    events: &Arc<Vec<Event>>,
    concurrency: usize,
    batches: usize,
    broker_pid: Option<u32>,
) -> anyhow::Result<Round> {
    let cpu_before = (
        cpu::own_ticks()?,
        broker_pid.map(cpu::ticks_of).transpose()?,
    );
    let started = Instant::now();
    let mut publishers = Vec::with_capacity(concurrency);
    for publisher in 0..concurrency {
        let share = batches / concurrency + usize::from(publisher < batches % concurrency);
        let (client, events) = (client.clone(), events.clone());
        publishers.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(share);
            for _ in 0..share {
                let batch_started = Instant::now();
                client.send_batch(&events).await?;
                times.push(batch_started.elapsed());
            }
            anyhow::Ok(times)
        }));
    }
    let mut times: Vec<Duration> = Vec::with_capacity(batches);
    for publisher in publishers {
        times.extend(publisher.await??);
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu_after = (
        cpu::own_ticks()?,
        broker_pid.map(cpu::ticks_of).transpose()?,
    );
    times.sort();
    let events_sent = (batches * events.len()) as f64;
    let per_event_us = |ticks: u64| cpu::ticks_to_us(ticks) / events_sent;
    Ok(Round {
        events_per_s: events_sent / wall,
        batch_ms_p50: times[times.len() / 2].as_secs_f64() * 1e3,
        batch_ms_p99: times[times.len() * 99 / 100].as_secs_f64() * 1e3,
        client_cpu_us_per_event: per_event_us(cpu_after.0 - cpu_before.0),
        broker_cpu_us_per_event: match (cpu_before.1, cpu_after.1) {
            (Some(before), Some(after)) => per_event_us(after - before),
            _ => 0.0,
        },
    })
}
