"""WebShop pages as element lists, and their `text` / `text_rich` renderings (reference/environments.md §3.3).

A page is a list of (kind, text) elements in display order. kind: "text" (not clickable), "button", "option"
(an option value), "selected" (the chosen value of its group), "asin" (a result link), "visited" (a result
already opened). Clickables are the lower-cased texts of every clickable element, in page order.

`text` mode joins the visible strings with " [SEP] " (WebShop's simple mode). `text_rich` puts one element per
line, buttons as "[button] x [button_]", the selected option and visited results as
"[clicked button] x [clicked button_]", prefixed "You have clicked {x}.\\n" after a click (alprl's rendering of
WebShop's rich mode; the exact whitespace of the HTML conversion is not reproduced).
"""

from __future__ import annotations

from .catalog import Catalog

PRODUCT_WINDOW = 10
SEP = " [SEP] "
CLICKABLE_KINDS = frozenset({"button", "option", "selected", "asin", "visited"})
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")
NO_REVIEWS = "There are no reviews for this product yet."
Element = tuple[str, str]


def search_page(instruction: str) -> list[Element]:
    return [("text", "WebShop"), ("text", "Instruction:"), ("text", instruction), ("button", "Search")]


def _header(instruction: str) -> list[Element]:
    return [("text", "Instruction:"), ("text", instruction), ("button", "Back to Search")]


def num_pages(total: int) -> int:
    return max(1, -(-total // PRODUCT_WINDOW))


def results_page(instruction: str, catalog: Catalog, results: list[int], page: int,
                 visited: set[int]) -> list[Element]:
    """page is 1-based; results are product indices, best first."""
    els = _header(instruction) + [("text", f"Page {page} (Total results: {len(results)})")]
    if page > 1:
        els.append(("button", "< Prev"))
    if page < num_pages(len(results)):
        els.append(("button", "Next >"))
    for idx in results[(page - 1) * PRODUCT_WINDOW: page * PRODUCT_WINDOW]:
        p = catalog.products[idx]
        els += [("visited" if idx in visited else "asin", p.asin), ("text", p.title), ("text", p.price_text)]
    return els


def item_page(instruction: str, catalog: Catalog, idx: int, selected: dict[str, str],
              show_attrs: bool) -> list[Element]:
    p = catalog.products[idx]
    els = _header(instruction) + [("button", "< Prev")]
    for group, values in p.options.items():
        els.append(("text", group))
        els += [("selected" if selected.get(group) == v else "option", v) for v in values]
    els += [("text", p.title), ("text", f"Price: {p.price_text}"), ("text", "Rating: N.A.")]
    els += [("button", b) for b in SUB_PAGES[:3]]
    if show_attrs:
        els.append(("button", "Attributes"))
    els.append(("button", "Buy Now"))
    return els


def sub_page(instruction: str, catalog: Catalog, idx: int, name: str) -> list[Element]:
    """name: one of SUB_PAGES (lower-cased or not)."""
    p = catalog.products[idx]
    content = {"description": [p.description], "features": list(p.bullets), "reviews": [NO_REVIEWS],
               "attributes": list(p.attributes)}[name.lower()]
    return _header(instruction) + [("button", "< Prev")] + [("text", c) for c in content]


def done_page(score: float) -> list[Element]:
    """alprl's simplification of WebShop's confirmation page."""
    return [("text", "Thank you for shopping with us!"), ("text", "Your score (min 0.0, max 1.0)"),
            ("text", repr(round(score, 4)))]


def clickables(els: list[Element]) -> list[str]:
    return [t.lower() for kind, t in els if kind in CLICKABLE_KINDS]


def render_text(els: list[Element]) -> str:
    return SEP.join(t for _, t in els)


def render_rich(els: list[Element], clicked: str | None) -> str:
    lines = [] if clicked is None else [f"You have clicked {clicked}."]
    for kind, t in els:
        if kind in ("button", "asin"):
            lines.append(f"[button] {t} [button_]")
        elif kind == "option":
            lines.append(f"  [button] {t} [button_]")
        elif kind == "selected":
            lines.append(f"  [clicked button] {t} [clicked button_]")
        elif kind == "visited":
            lines.append(f"[clicked button] {t} [clicked button_]")
        else:
            lines.append(t)
    return "\n".join(lines)
