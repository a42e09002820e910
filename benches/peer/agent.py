"""The LangGraph agent under test: a ReAct loop with one `calculate` tool, against an
OpenAI-compatible model through langchain-openai's ChatOpenAI, checkpointed by the caller's
checkpointer (AsyncPostgresSaver in the bench).

Two shapes, the same work per recursion (one model call, then the tool when it asked):
- `stategraph` (the default): LangGraph's documented minimal ReAct graph, a `StateGraph`
  over `MessagesState` with an `agent` node calling the model and a prebuilt `ToolNode`,
  routed by the prebuilt `tools_condition`. The least per-step work LangGraph offers for
  this loop, so the fairest to it.
- `prebuilt`: `langgraph.prebuilt.create_react_agent` (deprecated since LangGraph 1.0 in
  favour of langchain's `create_agent`), which builds the same two nodes plus its hooks'
  checks and the `remaining_steps` managed value.
"""

from __future__ import annotations

import ast
import operator
import warnings

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

GRAPHS = ("stategraph", "prebuilt")

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_MAX_LEN = 1000


def evaluate(expression: str) -> float:
    """Arithmetic only (+ - * / % ** and unary minus on numbers), never `eval`."""
    if len(expression) > _MAX_LEN:
        raise ValueError(f"expression longer than {_MAX_LEN} characters")

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        raise ValueError("only numbers and + - * / % ** are allowed")

    return walk(ast.parse(expression.replace("^", "**"), mode="eval"))


@tool
async def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression and return the number. Operators: + - * / % ^
    (power), parentheses, unary minus. At most 1000 characters."""
    # Async, so the ToolNode awaits it on the event loop instead of handing a sync
    # function to a thread pool: the cheaper of LangGraph's two ways to run a tool.
    value = evaluate(expression)
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        value = int(value)
    return str(value)


def chat_model(base_url: str) -> ChatOpenAI:
    """One client shared by every task, with langchain-openai's defaults (no streaming,
    the openai SDK's connection pool and retries)."""
    return ChatOpenAI(model="bench-model", base_url=base_url, api_key="bench-key")


def build(kind: str, model: ChatOpenAI, checkpointer):
    """The compiled graph of `kind` (one of GRAPHS) around `model`."""
    if kind == "prebuilt":
        from langgraph.prebuilt import create_react_agent

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return create_react_agent(model, [calculate], checkpointer=checkpointer)
    if kind != "stategraph":
        raise ValueError(f"unknown graph {kind!r}; one of {', '.join(GRAPHS)}")
    bound = model.bind_tools([calculate])

    async def agent(state: MessagesState) -> dict:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([calculate]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)
