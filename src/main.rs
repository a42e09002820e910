//! The `agentd` binary: the worker and the commands people use around it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use uuid::Uuid;

use agentd::cli;
use agentd::config::{Extra, Settings};
use agentd::contract::ControlMessage;

/// A worker daemon that runs a recursive ReAct agent for tasks from RabbitMQ.
#[derive(Debug, Parser)]
#[command(name = "agentd", version, about)]
struct Args {
    /// An extra configuration file, loaded after the defaults (config/default.toml).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume tasks and run them until SIGINT/SIGTERM.
    Worker,
    /// Serve the HTTP/SSE API and the live trace page (gateway.bind) until SIGINT/SIGTERM.
    Serve,
    /// A DEMO with no LLM account: a worker, the gateway and a scripted local model (not an
    /// LLM) in one process, in the namespace of config/dev.toml (database agentd_dev).
    Dev {
        /// Milliseconds the demo model waits before each reply.
        #[arg(long, default_value_t = 300)]
        latency_ms: u64,
    },
    /// Create the database if missing and apply the migrations.
    Migrate,
    /// Manage agents.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Publish a task; with --wait, wait for its end on a reply queue and print the answer.
    Submit {
        /// The agent that runs the task.
        #[arg(long)]
        agent: Uuid,
        /// The user's request.
        input: String,
        /// Use this task id instead of a generated one.
        #[arg(long)]
        task_id: Option<Uuid>,
        /// Group the task with earlier turns of a conversation.
        #[arg(long)]
        conversation: Option<Uuid>,
        /// A constraint shown to the model (repeatable).
        #[arg(long = "constraint")]
        constraints: Vec<String>,
        /// Ask for streamed LLM tokens (llm.delta events).
        #[arg(long)]
        stream: bool,
        /// What the task may spend, as JSON: {"max_tokens", "max_cost_usd",
        /// "max_tool_calls", "max_wall_secs", "on_breach": "answer"|"fail"|"pause"}.
        #[arg(long, value_parser = cli::control::budget_arg)]
        budget: Option<agentd::core::budget::Budget>,
        /// Wait for the task's terminal event (sent to a private reply queue through the
        /// message's reply_to) and print the answer; the exit code says whether it completed.
        /// Refused when no worker consumes the tasks queue; a --task-id that ran already
        /// prints its stored outcome.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this long (30s, 5m, 1h; exit code 124).
        #[arg(long, requires = "wait", value_name = "DURATION", value_parser = cli::control::duration_arg)]
        timeout: Option<std::time::Duration>,
        /// Run on this version of the agent (CONTRACT §11).
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..), conflicts_with = "channel")]
        agent_version: Option<i32>,
        /// Run on the version this channel of the agent serves (stable, canary, …).
        #[arg(long)]
        channel: Option<String>,
        /// The task's tenant (CONTRACT v3 §15); the agent's when left out.
        #[arg(long)]
        tenant: Option<String>,
        /// high or normal (the default): within a tenant held to max_running, high first.
        #[arg(long, value_parser = cli::token::priority_arg)]
        priority: Option<agentd::core::fair_share::Priority>,
    },
    /// Print events as they are published (all tasks), or one task's stored events and then
    /// its live ones until it ends.
    Watch {
        #[arg(long)]
        task: Option<Uuid>,
    },
    /// Print a task's full trace from PostgreSQL, with the tool calls it waits for a
    /// decision on.
    Trace { task_id: Uuid },
    /// List the tool calls that wait for a person's decision, with the commands to decide.
    Approvals {
        /// Only this task's.
        #[arg(long)]
        task: Option<Uuid>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Cancel a task, wherever it is.
    Cancel { task_id: Uuid },
    /// Give a running or waiting task guidance for its next recursions (context.user_guidance).
    Inject { task_id: Uuid, text: String },
    /// Approve a gated tool call of a waiting task (CONTRACT §7): as asked, with edited
    /// arguments (`--edit JSON`), or answer it without running the tool (`--respond JSON`).
    Approve {
        task_id: Uuid,
        tool_call_id: String,
        /// Run the call with these arguments (a JSON object) instead.
        #[arg(long, conflicts_with = "respond")]
        edit: Option<String>,
        /// Do not run the tool: the model gets this result (JSON).
        #[arg(long)]
        respond: Option<String>,
        /// Who decides (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Reject a gated tool call of a waiting task: the model gets an error with the reason.
    Reject {
        task_id: Uuid,
        tool_call_id: String,
        #[arg(long)]
        reason: Option<String>,
        /// Who decides (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Resolve a call whose outcome is unknown, held for a person (CONTRACT §14): it
    /// succeeded (`--result JSON`), failed (`--error TEXT`), is retried under the same
    /// idempotency key, or is skipped.
    Resolve {
        task_id: Uuid,
        tool_call_id: String,
        #[arg(long, value_parser = ["succeeded", "failed", "retry", "skip"])]
        outcome: String,
        /// succeeded: the result the call had (JSON).
        #[arg(long)]
        result: Option<String>,
        /// failed: the call's error.
        #[arg(long)]
        error: Option<String>,
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// Who decides (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Pause a running task before its next LLM call (it becomes waiting, reason paused).
    Pause { task_id: Uuid },
    /// Resume a task waiting after a pause or a budget breach, optionally with a new budget.
    Resume {
        task_id: Uuid,
        /// The new budget, as JSON (replaces the task's).
        #[arg(long, value_parser = cli::control::budget_arg)]
        budget: Option<agentd::core::budget::Budget>,
    },
    /// Delete ended tasks older than an age, with their whole trace.
    Prune(cli::prune::PruneArgs),
    /// Fork a task from recursion N: a new task that starts from the state the original had
    /// after recursion N - 1 (nothing before N runs again); prints the new task_id.
    Fork {
        task_id: Uuid,
        /// The recursion the new task starts at.
        #[arg(long = "from")]
        from_iteration: i32,
        /// The new task's input (default: the original's).
        #[arg(long)]
        input: Option<String>,
        /// The agent version the fork runs on (default: the original's).
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        agent_version: Option<i32>,
    },
    /// Re-enqueue ended tasks (by status, fail reason and age) as new tasks that point at
    /// their originals, at a bounded rate.
    Replay(cli::replay::ReplayArgs),
    /// Rerun an ended task from its record (model replies and tool results recorded, or
    /// live); prints the new task_id.
    Rerun(cli::rerun::RerunArgs),
    /// List every tool a worker would offer (built-in and MCP) with its source.
    Tools,
    /// List tasks across agents, newest first (by status, agent and age).
    Tasks(cli::tasks::TasksArgs),
    /// Manage schedules: agents that run on a clock (cron in a time zone, or an interval).
    #[command(subcommand)]
    Schedule(cli::schedule::ScheduleCommand),
    /// Evaluation runs (CONTRACT v3 §13): rerun an agent's ended tasks against a version and
    /// compare the outcomes; `eval report --min-pass` is a CI gate.
    #[command(subcommand)]
    Eval(cli::eval::EvalCommand),
    /// Manage the gateway's scoped tokens (CONTRACT v3 §15): create, list, revoke.
    #[command(subcommand)]
    Token(cli::token::TokenCommand),
    /// Print the AsyncAPI 3 document of the broker interface (tasks, control messages,
    /// events) as JSON; needs no configuration, database or broker.
    Asyncapi {
        /// Compare with the file at PATH instead of printing; exit non-zero when it differs.
        #[arg(long, value_name = "PATH")]
        check: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum AgentCommand {
    /// Create an agent and print its agent_id.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long)]
        model: String,
        #[arg(long)]
        max_iteration: Option<i32>,
        /// Comma-separated tool names the agent may call (default: every built-in tool).
        #[arg(long, value_delimiter = ',')]
        tools: Option<Vec<String>>,
        /// Comma-separated tool names or globs (`mail__*`) whose calls need a person's
        /// decision (CONTRACT §7).
        #[arg(long, value_delimiter = ',')]
        approval_tools: Option<Vec<String>>,
        /// How long an approval request waits, in seconds (default 86400).
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        approval_timeout_secs: Option<i32>,
        /// What an expired approval request does: reject (default) or fail.
        #[arg(long, value_parser = ["reject", "fail"])]
        on_approval_expiry: Option<String>,
        /// A file holding the agent's instructions (CONTRACT §11), rendered verbatim once
        /// in the system message.
        #[arg(long, value_name = "FILE")]
        instructions_file: Option<PathBuf>,
        /// Stall detection (CONTRACT §14): identical recursions in a row that make a stall
        /// (default 3; 0 turns detection off).
        #[arg(long, value_parser = clap::value_parser!(u32).range(0..=1000))]
        stall_repeat: Option<u32>,
        /// What a stall does: nudge (default), answer, pause or fail.
        #[arg(long, value_parser = ["nudge", "answer", "pause", "fail"])]
        stall_action: Option<String>,
        /// What a side-effecting call whose outcome is unknown does: tell_model (default)
        /// or hold (the task waits for `agentd resolve`).
        #[arg(long, value_parser = ["tell_model", "hold"])]
        on_unknown: Option<String>,
        /// The tenant the agent and its tasks belong to (default: `default`).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// List agents.
    List,
    #[command(flatten)]
    Versions(cli::versions::VersionCommand),
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // The document describes the contract's default names, so it is printed before (and
    // whether or not) any configuration loads.
    if let Command::Asyncapi { check } = &args.command {
        return finish(cli::asyncapi::run(check.as_deref()));
    }
    // `agentd dev` runs in the namespace of config/dev.toml (the built-in copy when the
    // working directory has none) unless told otherwise.
    let dev_config = PathBuf::from("config/dev.toml");
    let extra = match (&args.command, &args.config) {
        (Command::Dev { .. }, None) if dev_config.is_file() => Some(Extra::File(&dev_config)),
        (Command::Dev { .. }, None) => Some(Extra::BuiltIn(agentd::config::BUILT_IN_DEV)),
        (_, config) => config.as_deref().map(Extra::File),
    };
    let config_hint = match extra {
        Some(Extra::File(path)) => Some(path.display().to_string()),
        _ => None,
    };
    let settings = match cli::settings::load(extra) {
        Ok(settings) => settings,
        Err(err) => {
            cli::out::note(format_args!("agentd: {err:#}"));
            return ExitCode::from(2);
        }
    };
    cli::telemetry::init(&settings.log);
    finish(dispatch(args.command, settings, config_hint).await)
}

/// The exit code of a command; its error, if any, on stderr. A reader that went away
/// (`agentd trace ID | head`) ends the command quietly.
fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(err) if cli::out::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            cli::out::note(format_args!("agentd: {err:#}"));
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(
    command: Command,
    settings: Settings,
    config_hint: Option<String>,
) -> anyhow::Result<ExitCode> {
    match command {
        Command::Worker => cli::worker(settings).await,
        Command::Serve => cli::serve(settings).await,
        Command::Dev { latency_ms } => {
            let hint = config_hint.unwrap_or_else(|| "config/dev.toml".into());
            let latency = std::time::Duration::from_millis(latency_ms);
            cli::dev::run(settings, latency, &hint).await
        }
        Command::Migrate => cli::migrate(&settings).await,
        Command::Agent(AgentCommand::Create {
            name,
            model,
            max_iteration,
            tools,
            approval_tools,
            approval_timeout_secs,
            on_approval_expiry,
            instructions_file,
            stall_repeat,
            stall_action,
            on_unknown,
            tenant,
        }) => {
            let instructions = match instructions_file {
                Some(path) => Some(cli::versions::read_text(&path)?),
                None => None,
            };
            let stall = cli::resolve::stall_flags(stall_repeat, stall_action.as_deref())?;
            let agent = agentd::store::agents::NewAgent {
                tenant_id: cli::token::tenant_arg(tenant.as_deref())?,
                stall,
                on_unknown,
                name,
                model,
                max_iteration,
                tools,
                approval_tools,
                approval_timeout_secs,
                on_approval_expiry,
                instructions,
            };
            cli::agent_create(&settings, &agent).await
        }
        Command::Agent(AgentCommand::List) => cli::agent_list(&settings).await,
        Command::Agent(AgentCommand::Versions(command)) => {
            cli::versions::run(&settings, command).await
        }
        Command::Submit {
            agent,
            input,
            task_id,
            conversation,
            constraints,
            stream,
            wait,
            timeout,
            budget,
            agent_version,
            channel,
            tenant,
            priority,
        } => {
            let task = agentd::contract::TaskMessage {
                tenant_id: cli::token::tenant_arg(tenant.as_deref())?,
                priority,
                task_id,
                agent_id: agent,
                input,
                conversation_id: conversation,
                constraints,
                stream,
                budget,
                agent_version,
                channel,
                rerun: None,
            };
            cli::submit::run(&settings, &task, wait, timeout).await
        }
        Command::Watch { task } => cli::watch::run(&settings, task).await,
        Command::Trace { task_id } => cli::trace::run(&settings, task_id).await,
        Command::Approvals { task, limit } => cli::approvals::list(&settings, task, limit).await,
        Command::Cancel { task_id } => cli::cancel::run(&settings, task_id).await,
        Command::Inject { task_id, text } => {
            let inject = agentd::contract::control::Inject { task_id, text };
            cli::control::send(&settings, ControlMessage::Inject(inject)).await
        }
        Command::Approve {
            task_id,
            tool_call_id,
            edit,
            respond,
            by,
        } => {
            let decision = cli::approvals::approval(edit, respond, by)?;
            cli::approvals::run(&settings, task_id, &tool_call_id, decision).await
        }
        Command::Reject {
            task_id,
            tool_call_id,
            reason,
            by,
        } => {
            let decision = cli::approvals::rejection(reason, by);
            cli::approvals::run(&settings, task_id, &tool_call_id, decision).await
        }
        Command::Resolve {
            task_id,
            tool_call_id,
            outcome,
            result,
            error,
            reason,
            by,
        } => {
            let resolution = cli::resolve::resolution(&outcome, result, error, reason, by)?;
            cli::resolve::run(&settings, task_id, &tool_call_id, &resolution).await
        }
        Command::Pause { task_id } => {
            let pause = agentd::contract::control::Pause { task_id };
            cli::control::send(&settings, ControlMessage::Pause(pause)).await
        }
        Command::Resume { task_id, budget } => {
            let resume = agentd::contract::control::Resume { task_id, budget };
            cli::control::send(&settings, ControlMessage::Resume(resume)).await
        }
        Command::Prune(args) => cli::prune::run(&settings, &args).await,
        Command::Replay(args) => cli::replay::run(&settings, &args).await,
        Command::Fork {
            task_id,
            from_iteration,
            input,
            agent_version,
        } => cli::fork(&settings, task_id, from_iteration, (input, agent_version)).await,
        Command::Rerun(args) => cli::rerun::run(&settings, &args).await,
        Command::Tools => cli::tools::run(&settings).await,
        Command::Tasks(args) => cli::tasks::run(&settings, &args).await,
        Command::Schedule(command) => cli::schedule::run(&settings, command).await,
        Command::Token(command) => cli::token::run(&settings, command).await,
        Command::Eval(command) => cli::eval::run(&settings, command).await,
        Command::Asyncapi { check } => cli::asyncapi::run(check.as_deref()),
    }
}
