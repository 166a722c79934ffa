"""A static site generator: pages with front matter, slugs, routes and a sitemap."""
