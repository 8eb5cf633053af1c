"""The product taxonomy the catalog is generated from: category -> product type -> vocabularies.

Each `ProductType` carries what WebShop scraped per product query: the canonical `query`, a three-level
`path` (joined with " › " into `product_category`, as WebShop does), title heads, an attribute vocabulary
(short phrases, as WebShop's `Attributes`), option groups with value pools, and a price range in dollars.

Option pools keep every value apart by name (no value appears twice in a type), but not under the reward:
WebShop's fuzzy option match (token_set_ratio > 85 on the goal's (group, value) pair, see reward.py) lets
some values of a group credit each other, as in WebShop's own catalog ("x-large" credits "large", "7.5"
credits "7"). tests/envs/test_webshop_reward.py pins which pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

COLORS = ("black", "white", "red", "blue", "green", "pink", "gray", "navy", "beige", "brown", "purple", "yellow")
SIZES_WEAR = ("small", "medium", "large", "x-large", "xx-large")
SIZES_SHOE = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "11", "12")


@dataclass(frozen=True)
class ProductType:
    """One product type; see the module docstring. price: (low, high) dollars for the realized price."""

    key: str
    category: str
    path: tuple[str, str, str]
    query: str
    heads: tuple[str, ...]
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price: tuple[float, float]


def _t(key: str, category: str, path: str, query: str, heads: str, attributes: str,
       options: dict[str, tuple[str, ...]], price: tuple[float, float]) -> ProductType:
    """Compact constructor: `path` and `heads` are '|'-separated, attributes ';'."""
    p = tuple(path.split("|"))
    assert len(p) == 3, key
    return ProductType(key, category, (p[0], p[1], p[2]), query, tuple(heads.split("|")),
                       tuple(a.strip() for a in attributes.split(";")), options, price)


TYPES: tuple[ProductType, ...] = (
    # beauty
    _t("shampoo", "beauty", "Beauty & Personal Care|Hair Care|Shampoos", "sulfate free shampoo",
       "Shampoo|Moisturizing Shampoo|Clarifying Shampoo",
       "sulfate free; paraben free; for dry hair; natural ingredients; cruelty free; color safe; hair growth",
       {"scent": ("lavender", "coconut", "eucalyptus", "unscented", "citrus"),
        "size": ("8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz")}, (6, 40)),
    _t("face_cream", "beauty", "Beauty & Personal Care|Skin Care|Face Moisturizers", "face moisturizer cream",
       "Face Cream|Moisturizer Cream|Night Cream",
       "anti aging; hyaluronic acid; fine lines; dry skin; fragrance free; non greasy; sensitive skin",
       {"size": ("1 oz", "1.7 oz", "2.5 oz", "3.4 oz")}, (9, 80)),
    _t("lipstick", "beauty", "Beauty & Personal Care|Makeup|Lipstick", "long lasting lipstick",
       "Matte Lipstick|Lipstick|Satin Lipstick",
       "long lasting; highly pigmented; smudge proof; vegan formula; hydrating; cruelty free",
       {"color": ("red", "pink", "brown", "purple", "coral", "nude")}, (5, 35)),
    _t("deodorant", "beauty", "Beauty & Personal Care|Personal Care|Deodorants", "natural deodorant",
       "Deodorant|Deodorant Stick|Antiperspirant Deodorant",
       "aluminum free; sensitive skin; long lasting; baking soda free; natural ingredients; travel size",
       {"scent": ("lavender", "unscented", "citrus", "sandalwood", "cucumber"),
        "size": ("2.65 oz", "3 oz", "pack of 2", "pack of 3")}, (5, 30)),
    _t("nail_polish", "beauty", "Beauty & Personal Care|Makeup|Nail Polish", "gel nail polish",
       "Nail Polish|Gel Polish|Quick Dry Polish",
       "quick dry; long lasting; chip resistant; non toxic; high shine; easy to apply",
       {"color": ("red", "pink", "navy", "beige", "purple", "green")}, (4, 25)),
    _t("hair_dryer", "beauty", "Beauty & Personal Care|Hair Care|Hair Dryers", "ionic hair dryer",
       "Hair Dryer|Ionic Hair Dryer|Travel Hair Dryer",
       "ionic technology; fast drying; low noise; lightweight design; cool shot; heat settings",
       {"color": ("black", "white", "pink", "purple")}, (19, 150)),
    # electronics
    _t("headphones", "electronics", "Electronics|Headphones|Over-Ear Headphones", "wireless headphones",
       "Over-Ear Headphones|Wireless Headphones|Studio Headphones",
       "noise cancelling; bluetooth wireless; long battery life; foldable design; built in microphone; "
       "deep bass; hands free calling",
       {"color": ("black", "white", "silver", "green", "pink")}, (19, 300)),
    _t("earbuds", "electronics", "Electronics|Headphones|Earbud Headphones", "wireless earbuds",
       "Wireless Earbuds|True Wireless Earbuds|Sport Earbuds",
       "noise cancelling; water resistant; charging case; touch control; bluetooth wireless; deep bass",
       {"color": ("black", "white", "navy", "red")}, (15, 200)),
    _t("phone_case", "electronics", "Electronics|Cell Phone Accessories|Cases", "phone case",
       "Phone Case|Protective Case|Slim Case",
       "shockproof; slim fit; wireless charging compatible; scratch resistant; raised edges; easy install",
       {"color": ("black", "clear", "pink", "blue", "green", "purple"),
        "style": ("standard", "max", "mini", "plus")}, (6, 40)),
    _t("charger", "electronics", "Electronics|Cell Phone Accessories|Chargers", "fast charger",
       "Wall Charger|Fast Charger|Charging Block",
       "fast charging; compact size; overcharge protection; foldable plug; universal compatibility",
       {"style": ("single port", "dual port", "with cable", "car charger")}, (8, 45)),
    _t("speaker", "electronics", "Electronics|Portable Audio|Bluetooth Speakers", "portable bluetooth speaker",
       "Bluetooth Speaker|Portable Speaker|Outdoor Speaker",
       "waterproof; loud sound; long battery life; bluetooth wireless; deep bass; shockproof",
       {"color": ("black", "blue", "red", "gray", "green")}, (19, 250)),
    _t("keyboard", "electronics", "Electronics|Computer Accessories|Keyboards", "wireless keyboard",
       "Wireless Keyboard|Mechanical Keyboard|Ergonomic Keyboard",
       "quiet typing; rechargeable battery; backlit keys; ergonomic design; plug and play; spill resistant",
       {"color": ("black", "white", "gray", "pink"), "style": ("full size", "compact", "with mouse")},
       (15, 160)),
    _t("hdmi_cable", "electronics", "Electronics|Accessories|HDMI Cables", "high speed hdmi cable",
       "HDMI Cable|High Speed Cable|Braided Cable",
       "high speed; gold plated; braided nylon; ethernet support; ultra hd",
       {"size": ("3 ft", "6 ft", "10 ft", "15 ft", "25 ft")}, (5, 35)),
    # fashion
    _t("running_shoes", "fashion", "Clothing, Shoes & Jewelry|Men|Running Shoes", "men's running shoes",
       "Running Shoes|Road Running Shoes|Trail Running Shoes",
       "lightweight; breathable mesh; non slip; rubber sole; arch support; memory foam; lace up",
       {"color": ("black", "white", "gray", "navy", "red"), "size": SIZES_SHOE}, (30, 160)),
    _t("sneakers", "fashion", "Clothing, Shoes & Jewelry|Women|Fashion Sneakers", "women's sneakers",
       "Fashion Sneakers|Canvas Sneakers|Slip On Sneakers",
       "slip on; memory foam; breathable knit; non slip; lightweight; cushioned insole",
       {"color": ("black", "white", "pink", "beige"), "size": SIZES_SHOE}, (25, 120)),
    _t("tshirt", "fashion", "Clothing, Shoes & Jewelry|Men|T-Shirts", "men's t-shirt",
       "Crew Neck T-Shirt|Cotton T-Shirt|Graphic T-Shirt",
       "short sleeve; machine wash; classic fit; soft cotton; moisture wicking; tagless",
       {"color": ("black", "white", "navy", "gray", "green", "red"), "size": SIZES_WEAR}, (8, 35)),
    _t("dress", "fashion", "Clothing, Shoes & Jewelry|Women|Dresses", "women's summer dress",
       "Summer Dress|Maxi Dress|Casual Dress",
       "v neck; short sleeve; flowy hem; machine wash; with pockets; lightweight fabric",
       {"color": ("black", "blue", "pink", "yellow", "green"), "size": SIZES_WEAR}, (18, 90)),
    _t("jeans", "fashion", "Clothing, Shoes & Jewelry|Men|Jeans", "men's slim fit jeans",
       "Slim Fit Jeans|Straight Leg Jeans|Stretch Jeans",
       "slim fit; stretch denim; machine wash; five pocket; button closure; regular rise",
       {"color": ("black", "blue", "gray", "khaki"), "size": ("30w x 30l", "32w x 32l", "34w x 32l", "36w x 34l")},
       (20, 80)),
    _t("hoodie", "fashion", "Clothing, Shoes & Jewelry|Women|Hoodies", "women's pullover hoodie",
       "Pullover Hoodie|Fleece Hoodie|Hooded Sweatshirt",
       "long sleeve; soft fleece; kangaroo pocket; drawstring hood; machine wash; relaxed fit",
       {"color": ("black", "gray", "pink", "purple", "beige"), "size": SIZES_WEAR}, (15, 60)),
    _t("watch", "fashion", "Clothing, Shoes & Jewelry|Men|Wrist Watches", "men's wrist watch",
       "Wrist Watch|Analog Watch|Sport Watch",
       "water resistant; stainless steel; quartz movement; leather band; scratch resistant; luminous hands",
       {"color": ("black", "silver", "brown", "navy")}, (20, 300)),
    # grocery
    _t("coffee", "grocery", "Grocery & Gourmet Food|Beverages|Ground Coffee", "ground coffee",
       "Ground Coffee|Medium Roast Coffee|Dark Roast Coffee",
       "medium roast; organic; fair trade; whole bean; low acid; rich flavor",
       {"flavor": ("original", "hazelnut", "vanilla", "mocha", "cinnamon"),
        "size": ("12 ounce", "24 ounce", "2 pound", "pack of 2")}, (7, 45)),
    _t("tea", "grocery", "Grocery & Gourmet Food|Beverages|Tea", "herbal tea bags",
       "Herbal Tea|Green Tea|Tea Bags",
       "caffeine free; organic; non gmo; individually wrapped; gluten free; natural ingredients",
       {"flavor": ("chamomile", "peppermint", "ginger", "lemon", "hibiscus"),
        "size": ("20 count", "40 count", "100 count")}, (4, 30)),
    _t("chips", "grocery", "Grocery & Gourmet Food|Snacks|Potato Chips", "kettle cooked potato chips",
       "Potato Chips|Kettle Chips|Crinkle Cut Chips",
       "gluten free; kettle cooked; non gmo; no artificial flavors; family size; individually bagged",
       {"flavor": ("sea salt", "barbecue", "jalapeno", "sour cream onion", "dill pickle"),
        "size": ("pack of 6", "pack of 12", "pack of 24")}, (5, 35)),
    _t("protein_bar", "grocery", "Grocery & Gourmet Food|Snacks|Protein Bars", "protein bars",
       "Protein Bars|Energy Bars|Snack Bars",
       "high protein; low sugar; gluten free; keto friendly; plant based; individually wrapped",
       {"flavor": ("chocolate", "peanut butter", "cookie dough", "birthday cake", "almond"),
        "size": ("pack of 6", "pack of 12", "pack of 24")}, (9, 45)),
    _t("olive_oil", "grocery", "Grocery & Gourmet Food|Pantry|Olive Oil", "extra virgin olive oil",
       "Olive Oil|Extra Virgin Olive Oil|Cold Pressed Olive Oil",
       "extra virgin; cold pressed; non gmo; single origin; glass bottle; rich flavor",
       {"size": ("16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "1 gallon")}, (8, 60)),
    _t("honey", "grocery", "Grocery & Gourmet Food|Pantry|Honey", "raw honey",
       "Raw Honey|Pure Honey|Wildflower Honey",
       "raw unfiltered; pure natural; non gmo; gluten free; squeeze bottle; kosher",
       {"size": ("12 ounce", "16 ounce", "32 ounce", "5 pound")}, (6, 50)),
    # home
    _t("pillow", "home", "Home & Kitchen|Bedding|Bed Pillows", "bed pillows",
       "Bed Pillows|Pillow|Cooling Pillow",
       "hypoallergenic; machine washable; down alternative; cooling gel; side sleeper; soft support",
       {"size": ("standard", "queen", "king"), "style": ("firm", "plush", "cloud")}, (15, 90)),
    _t("curtains", "home", "Home & Kitchen|Home Decor|Window Curtains", "blackout curtains",
       "Blackout Curtains|Window Curtains|Thermal Curtains",
       "blackout; thermal insulated; noise reducing; grommet top; machine washable; energy saving",
       {"color": ("gray", "navy", "beige", "white", "green"),
        "size": ("42w x 63l", "52w x 84l", "52w x 95l")}, (15, 80)),
    _t("desk_lamp", "home", "Home & Kitchen|Lighting|Desk Lamps", "led desk lamp",
       "Desk Lamp|LED Desk Lamp|Reading Lamp",
       "dimmable; eye caring; touch control; usb charging port; adjustable arm; energy saving",
       {"color": ("black", "white", "silver", "pink")}, (15, 90)),
    _t("office_chair", "home", "Home & Kitchen|Furniture|Office Chairs", "ergonomic office chair",
       "Office Chair|Ergonomic Chair|Desk Chair",
       "ergonomic design; lumbar support; adjustable height; breathable mesh; swivel wheels; easy assembly",
       {"color": ("black", "gray", "white", "blue")}, (60, 400)),
    _t("storage_bins", "home", "Home & Kitchen|Storage & Organization|Storage Bins", "fabric storage bins",
       "Storage Bins|Storage Baskets|Fabric Bins",
       "foldable; with handles; sturdy frame; space saving; easy assembly; machine washable",
       {"color": ("gray", "beige", "navy", "white", "brown"), "size": ("set of 3", "set of 6", "set of 8")},
       (12, 60)),
    _t("cookware", "home", "Home & Kitchen|Kitchen & Dining|Cookware Sets", "nonstick cookware set",
       "Cookware Set|Nonstick Cookware|Pots and Pans Cookware",
       "nonstick coating; dishwasher safe; induction compatible; oven safe; stay cool handles; pfoa free",
       {"color": ("black", "gray", "red", "beige"), "size": ("8 piece", "10 piece", "12 piece", "15 piece")},
       (40, 300)),
    _t("bath_towels", "home", "Home & Kitchen|Bath|Bath Towels", "cotton bath towels",
       "Bath Towels|Cotton Towels|Towel Set",
       "highly absorbent; quick dry; soft cotton; machine washable; hotel quality; lint free",
       {"color": ("white", "gray", "navy", "beige", "green"), "size": ("set of 2", "set of 4", "set of 6")},
       (15, 80)),
)

CATEGORIES: tuple[str, ...] = tuple(sorted({t.category for t in TYPES}))

# Adjective-free filler for bullets and descriptions (no digits, colors or size words): no option value appears in
# a product's text, which WebShop's earlier option reward searched (its goal.py before the fuzzy-only version).
BENEFITS = (
    "made for everyday use", "a dependable pick for daily routines", "designed with comfort in mind",
    "built to last through regular use", "a thoughtful gift for friends and family",
    "easy to use straight out of the package", "crafted with attention to detail", "backed by friendly support",
)
PRAISE = ("practical", "popular", "versatile", "reliable", "handy", "thoughtful")
