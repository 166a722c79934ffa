from datetime import date

import pytest

from sitegen.pages import Page, PageError, parse_page
from sitegen.router import RouteError, Router
from sitegen.site import build
from sitegen.text import slugify

SOURCES = {
    "intro.md": "title: Hello, World\ndate: 2024-01-10\n---\nFirst post.",
    "menu.md": "title: Café Menu\ndate: 2024-02-01\nsection: food\n---\nSoup.",
}


def test_slugify_folds_accents_and_punctuation():
    assert slugify("Café  Menu: Spring") == "cafe-menu-spring"
    assert slugify("...Leading dots") == "leading-dots"


def test_page_front_matter():
    page = parse_page(SOURCES["menu.md"])
    assert (page.slug, page.section, page.published) == ("cafe-menu", "food", date(2024, 2, 1))


def test_page_without_front_matter_end():
    with pytest.raises(PageError, match="draft.md"):
        parse_page("title: x\ndate: 2024-01-01\nno separator", "draft.md")


def test_router_rejects_malformed_slugs():
    router = Router()
    for slug in ("-draft-", "Upper", "two--dashes", "naïve"):
        with pytest.raises(RouteError, match="not a valid URL slug"):
            router.register(Page("x", slug, date(2024, 1, 1), ""))
    assert router.routes == {}


def test_duplicate_urls_rejected():
    router = Router()
    router.register(Page("a", "same", date(2024, 1, 1), ""))
    with pytest.raises(RouteError, match="claimed"):
        router.register(Page("b", "same", date(2024, 1, 2), ""))


def test_build_sitemap_newest_first():
    router, sitemap = build(SOURCES, "https://example.org/")
    assert sitemap == ["https://example.org/food/cafe-menu", "https://example.org/hello-world"]
    assert router.resolve("/food/cafe-menu/").title == "Café Menu"


def test_question_title_page_is_routed():
    sources = {**SOURCES, "news.md": "title: What's new?\ndate: 2024-03-01\n---\nLots."}
    router, sitemap = build(sources, "https://example.org")
    assert sitemap[0] == "https://example.org/what-s-new"
    assert router.resolve("/what-s-new").title == "What's new?"


def test_exclaimed_title_in_section():
    sources = {"sale.md": "title: Spring sale!\ndate: 2024-04-01\nsection: offers\n---\n-20%"}
    router, _ = build(sources, "https://example.org")
    assert list(router.routes) == ["/offers/spring-sale"]
