"""`/docs`: Swagger UI from the files the ``swagger-ui-py`` package ships, never a CDN, so
the API's documentation works on a machine with no way out."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/docs"
ASSETS_URL = f"{DOCS_URL}/assets"


def swagger_ui_dir() -> Path:
    return Path(str(files("swagger_ui").joinpath("static")))


def install(app: FastAPI, openapi_url: str) -> None:
    """Serve Swagger UI at ``/docs``, its scripts and styles under ``/docs/assets``."""
    app.mount(ASSETS_URL, StaticFiles(directory=swagger_ui_dir()), name="swagger-ui")

    @app.get(DOCS_URL, include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon-32x32.png",
        )
