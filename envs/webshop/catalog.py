"""Procedural product catalog (reference/environments.md §3.1), built once per process and shared.

`get_catalog(num_products, seed)` is cached (lru_cache): every env of a vector env or GRPO group in one process
reuses the same products and BM25 index; treat the result as read-only. Products are ordered by ASIN, so document
ids in the index break ties "by asin". Text fields are ASCII; the `›` separator lives only in
`product_category` (never shown in observations).
"""

from __future__ import annotations

import functools
import random
import string
from dataclasses import dataclass

from envs.splits import derive_seed
from envs.webshop_defaults import DEFAULT_NUM_PRODUCTS

from .search import BM25Index, tokenize
from .taxonomy import BENEFITS, CATEGORIES, PRAISE, TYPES, ProductType

_ASIN_CHARS = string.ascii_uppercase + string.digits
_SYLLABLES = ("ka", "lo", "mi", "zen", "tra", "vo", "lu", "ne", "ori", "pa", "qui", "sto", "vi", "xa", "bel",
              "cor", "dra", "fi", "gal", "hy", "jo", "mar", "nox", "pel", "sol", "tek", "ul", "wen", "yo", "zi")
# The generator's colour words: brand names avoid them, and an option value is dropped when its first one (or the
# value itself) is in the product's text. Not the reward's list (matching.COLOR_WORDS, WebShop's): changing this one
# would regenerate every catalog, and with it every task.
CATALOG_COLORS = (
    "beige", "black", "blue", "blush", "bronze", "brown", "burgundy", "camel", "charcoal", "clear", "coral",
    "cream", "gold", "gray", "green", "grey", "ivory", "khaki", "lavender", "lilac", "maroon", "mint", "navy",
    "nude", "olive", "orange", "peach", "pink", "purple", "red", "rose", "silver", "teal", "turquoise", "violet",
    "white", "yellow",
)


@dataclass(frozen=True, slots=True, eq=False)
class Product:
    """One catalog item (WebShop fields; `title` is WebShop's name/Title).

    price: the realized price in dollars; price_text: "$x.xx" or "$a to $b" (range containing the price);
    options: group -> values (groups sorted by name, values lower-case); type_key: the taxonomy type."""

    asin: str
    title: str
    query: str
    category: str
    product_category: str
    price: float
    price_text: str
    options: dict[str, tuple[str, ...]]
    attributes: tuple[str, ...]
    bullets: tuple[str, ...]
    description: str
    type_key: str

    @property
    def name(self) -> str:
        return self.title

    def search_text(self) -> str:
        """What the index sees: title, attributes, bullet points and category levels."""
        return " ".join((self.title, " ".join(self.attributes), " ".join(self.bullets),
                         self.product_category.replace("›", " ")))


class Catalog:
    """products (sorted by asin), the BM25 index over them, and lookups by lower-case asin and by category."""

    def __init__(self, products: list[Product]) -> None:
        self.products = sorted(products, key=lambda p: p.asin)
        self.index = BM25Index([tokenize(p.search_text()) for p in self.products])
        self.by_asin = {p.asin.lower(): i for i, p in enumerate(self.products)}
        self.by_category: dict[str, list[int]] = {c: [] for c in CATEGORIES}
        for i, p in enumerate(self.products):
            self.by_category[p.category].append(i)

    def __len__(self) -> int:
        return len(self.products)


def catalog_color(value: str) -> str:
    """The first CATALOG_COLORS word contained in `value`, else `value`: what the generator keeps out of the text."""
    return next((c for c in CATALOG_COLORS if c in value), value)


def _brands(rng: random.Random, n: int) -> list[str]:
    """Pseudo-word brand names that contain no color word (so no option value hides in a title)."""
    out: set[str] = set()
    while len(out) < n:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))
        if not any(c in word for c in CATALOG_COLORS):
            out.add(word.capitalize())
    return sorted(out)


def _cap(phrase: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in phrase.split())


def _title(rng: random.Random, brand: str, head: str, attrs: list[str]) -> str:
    form = rng.randrange(3)
    if form == 0:
        return f"{brand} {_cap(attrs[0])} {head}"
    if form == 1:
        return f"{brand} {head} - {_cap(attrs[0])}, {_cap(attrs[1])}"
    return f"{brand} {head} with {_cap(attrs[-1])}"


def _options(rng: random.Random, t: ProductType, text: str) -> dict[str, tuple[str, ...]]:
    """2-5 values per group; values whose normalized form occurs in the product text are dropped (WebShop's
    earlier option reward credited a value found in the text), and a group left with < 2 values is dropped."""
    out: dict[str, tuple[str, ...]] = {}
    for group in sorted(t.options):
        pool = t.options[group]
        if rng.random() < 0.15:
            continue
        chosen = set(rng.sample(pool, rng.randint(2, min(5, len(pool)))))
        values = tuple(v for v in pool if v in chosen and catalog_color(v) not in text)
        if len(values) >= 2:
            out[group] = values
    return out


def _price(rng: random.Random, t: ProductType) -> tuple[float, str]:
    price = round(rng.uniform(*t.price), 2)
    if rng.random() < 0.2:  # a ranged listing, like WebShop's "$a to $b" items
        lo = round(price * rng.uniform(0.7, 0.95), 2)
        hi = round(price * rng.uniform(1.05, 1.4), 2)
        return price, f"${lo:.2f} to ${hi:.2f}"
    return price, f"${price:.2f}"


def _product(rng: random.Random, t: ProductType, brand: str, asin: str) -> Product:
    attrs = rng.sample(t.attributes, rng.randint(2, min(5, len(t.attributes))))
    head = rng.choice(t.heads)
    title = _title(rng, brand, head, attrs)
    bullets = [f"{_cap(a)}: {rng.choice(BENEFITS)}." for a in attrs]
    bullets.append(f"{head}: a {rng.choice(PRAISE)} choice from {brand}.")
    description = (f"The {brand} {head.lower()} is {rng.choice(BENEFITS)}. It is {attrs[0]} and {attrs[1]}, "
                   f"a {rng.choice(PRAISE)} addition to any home.")
    text = " ".join([title, *bullets, description]).lower()
    price, price_text = _price(rng, t)
    return Product(
        asin=asin, title=title, query=t.query, category=t.category, product_category=" › ".join(t.path),
        price=price, price_text=price_text, options=_options(rng, t, text), attributes=tuple(attrs),
        bullets=tuple(bullets), description=description, type_key=t.key,
    )


def build_catalog(num_products: int = DEFAULT_NUM_PRODUCTS, seed: int = 0) -> Catalog:
    """Generate `num_products` products (types uniform over the taxonomy) and index them; deterministic."""
    if num_products < len(TYPES):
        raise ValueError(f"num_products={num_products} must be >= {len(TYPES)} (one per product type)")
    rng = random.Random(derive_seed("webshop-catalog", seed, num_products))
    brands = _brands(rng, max(50, num_products // 20))
    asins: set[str] = set()
    products = []
    for i in range(num_products):
        asin = ""
        while not asin or asin in asins:
            asin = "B0" + "".join(rng.choice(_ASIN_CHARS) for _ in range(8))
        asins.add(asin)
        t = TYPES[i % len(TYPES)] if i < len(TYPES) else rng.choice(TYPES)  # every type appears at least once
        products.append(_product(rng, t, rng.choice(brands), asin))
    return Catalog(products)


@functools.lru_cache(maxsize=4)
def get_catalog(num_products: int = DEFAULT_NUM_PRODUCTS, seed: int = 0) -> Catalog:
    """The process-wide shared catalog for (num_products, seed)."""
    return build_catalog(num_products, seed)
