"""One shopping session: the page state and its transitions (WebShop `envs/web_agent_text_env.py`).

Action syntax `name[arg]`: the action is stripped, must end with "]", `name` is the text before the first "[",
`arg` (non-empty, lower-cased) the text between it and the final "]" (a linear-time reading of WebShop's
`(.+)\\[(.+)\\]`; WebShop's greedy regex splits at the last "[" instead, which only differs for arguments that
contain "["). `search[q]` is valid on the search page (anywhere but the done page with `search_anywhere`);
`click[x]` is valid iff x is a current clickable and x != "search".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import pages
from .catalog import Catalog
from .goals import SEARCH_RETURN_N, Goal
from .reward import get_reward


@dataclass(slots=True)
class ShopState:
    """page: "search" | "results" | "item" | "sub" | "done"; results: product indices of the last search (best
    first, at most 50); page_num: 1-based results page; item: product index on the item/sub page (-1 none);
    sub: sub-page name (lower-case); selected: option group -> chosen value; visited: opened results;
    clicked: argument of the last valid click (text_rich prefix); score/raw_score: set on purchase."""

    page: str = "search"
    query: str = ""
    results: list[int] = field(default_factory=list)
    page_num: int = 1
    item: int = -1
    sub: str = ""
    selected: dict[str, str] = field(default_factory=dict)
    visited: set[int] = field(default_factory=set)
    clicked: str | None = None
    score: float = 0.0
    raw_score: float = 0.0

    def copy(self) -> ShopState:
        return ShopState(self.page, self.query, list(self.results), self.page_num, self.item, self.sub,
                         dict(self.selected), set(self.visited), self.clicked, self.score, self.raw_score)


def parse_action(action: str) -> tuple[str, str] | None:
    """(name, lower-cased arg) of `name[arg]`, or None when the text has no such shape."""
    action = action.strip()
    i = action.find("[")
    if i <= 0 or not action.endswith("]") or len(action) - i < 3:
        return None
    return action[:i], action[i + 1:-1].lower()


class Shop:
    """The transition rules for one goal over a shared catalog."""

    def __init__(self, catalog: Catalog, goal: Goal, show_attrs: bool = False, search_anywhere: bool = False):
        self.catalog, self.goal = catalog, goal
        self.show_attrs, self.search_anywhere = show_attrs, search_anywhere

    def has_search_bar(self, s: ShopState) -> bool:
        return s.page == "search" or (self.search_anywhere and s.page != "done")

    def elements(self, s: ShopState) -> list[pages.Element]:
        instr = self.goal.instruction_text
        if s.page == "search":
            return pages.search_page(instr)
        if s.page == "results":
            return pages.results_page(instr, self.catalog, s.results, s.page_num, s.visited)
        if s.page == "item":
            return pages.item_page(instr, self.catalog, s.item, s.selected, self.show_attrs)
        if s.page == "sub":
            return pages.sub_page(instr, self.catalog, s.item, s.sub)
        return pages.done_page(s.score)

    def commands(self, s: ShopState, clickables: list[str]) -> list[str]:
        """Formatted admissible actions (verl-agent style): search placeholder, then one click per clickable."""
        head = ["search[<your query>]"] if self.has_search_bar(s) else []
        return head + [f"click[{c}]" for c in clickables if c != "search"]

    def apply(self, s: ShopState, action: str, clickables: list[str]) -> bool:
        """Apply `action` to `s` in place if valid (`clickables` of the current page); returns validity."""
        parsed = parse_action(action)
        if parsed is None:
            return False
        name, arg = parsed
        if name == "search" and self.has_search_bar(s):
            s.page, s.query, s.page_num, s.item, s.sub, s.clicked = "results", arg, 1, -1, "", None
            s.results = self.catalog.index.search(arg, SEARCH_RETURN_N)
            s.selected = {}
            return True
        if name != "click" or arg == "search" or arg not in clickables:
            return False
        self._click(s, arg)
        s.clicked = arg
        return True

    def _click(self, s: ShopState, arg: str) -> None:
        if arg == "back to search":
            s.page, s.item, s.sub, s.selected = "search", -1, "", {}
        elif arg == "next >":
            s.page_num += 1
        elif arg == "< prev":
            if s.page == "results":
                s.page_num -= 1
            elif s.page == "item":
                s.page, s.item, s.selected = "results", -1, {}
            else:
                s.page = "item"
        elif s.page == "results":
            s.page, s.item, s.selected = "item", self.catalog.by_asin[arg], {}
            s.visited.add(s.item)
        elif arg in ("description", "features", "reviews", "attributes"):
            s.page, s.sub = "sub", arg
        elif arg == "buy now":
            p = self.catalog.products[s.item]
            s.score, parts = get_reward(p, self.goal, p.price, dict(s.selected))
            s.raw_score = float(parts["raw_score"])
            s.page = "done"
        else:
            for group, values in self.catalog.products[s.item].options.items():
                if arg in values:
                    s.selected[group] = arg
