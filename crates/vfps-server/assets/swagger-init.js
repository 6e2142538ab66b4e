// Starts Swagger UI on the REST API's OpenAPI document. A file of its own,
// not an inline script: the page's Content-Security-Policy allows scripts
// from this origin only.
//
// The page is the server's list of the operations (#vfps-outline), shown at
// once. Swagger UI's stylesheet and 1.7 MB bundle are fetched from here, not
// by the page's markup, so neither holds the list back; Swagger UI draws into
// #swagger-ui (hidden by our stylesheet while the list is there), and once
// its operations are drawn and styled the list goes. The mark lets a
// benchmark see when.
"use strict";

(() => {
  const outline = document.getElementById("vfps-outline");
  const target = document.getElementById("swagger-ui");
  const ours = document.querySelector('link[href="/swagger/swagger-overrides.css"]');
  if (!outline || !target || !ours) return;
  const loaded = (element) =>
    new Promise((resolve, reject) => {
      element.addEventListener("load", resolve, { once: true });
      element.addEventListener("error", () => reject(new Error(`${element.src || element.href} did not load`)), { once: true });
    });

  // Swagger UI's stylesheet before ours, so that ours still wins.
  const style = Object.assign(document.createElement("link"), { rel: "stylesheet", href: "/swagger/swagger-ui.css" });
  const styled = loaded(style);
  ours.before(style);
  const script = Object.assign(document.createElement("script"), { src: "/swagger/swagger-ui-bundle.js" });
  const bundled = loaded(script);
  document.body.append(script);

  const drawn = new Promise((resolve) => {
    const seen = new MutationObserver(() => {
      if (target.querySelector(".opblock")) {
        seen.disconnect();
        resolve();
      }
    });
    seen.observe(target, { childList: true, subtree: true });
  });

  bundled
    .then(() => {
      window.ui = SwaggerUIBundle({
        url: "/swagger/v1/swagger.json",
        dom_id: "#swagger-ui",
        // No deep links: they put a link inside each operation's summary button
        // (axe-core: nested-interactive, a control a keyboard or screen reader
        // cannot reach on its own).
        deepLinking: false,
        presets: [SwaggerUIBundle.presets.apis],
        layout: "BaseLayout",
        // No validity badge: it is an image from validator.swagger.io, which the
        // policy refuses, and it would send the document's address there.
        validatorUrl: null,
      });
      return Promise.all([drawn, styled]);
    })
    .then(() => {
      outline.remove();
      performance.mark("vfps-swagger-drawn");
    })
    // Without Swagger UI the list stays: it is the whole document's outline.
    .catch((e) => console.warn(`Swagger UI did not start: ${e.message}`));
})();
