// Starts Swagger UI on the REST API's OpenAPI document. A file of its own,
// not an inline script: the page's Content-Security-Policy allows scripts
// from this origin only.
"use strict";

// The server's list of the operations (#vfps-outline) is the page until
// Swagger UI has drawn its own: then the list goes, and the stylesheet stops
// hiding Swagger UI's element. The mark lets a benchmark see when.
const outline = document.getElementById("vfps-outline");
const target = document.getElementById("swagger-ui");
if (outline && target) {
  const drawn = new MutationObserver(() => {
    if (target.querySelector(".opblock")) {
      drawn.disconnect();
      outline.remove();
      performance.mark("vfps-swagger-drawn");
    }
  });
  drawn.observe(target, { childList: true, subtree: true });
}

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
