// Starts Swagger UI on the service's own OpenAPI document (a file, not an inline script, so the
// page keeps a Content-Security-Policy without 'unsafe-inline'). No validator: nothing leaves.
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.getAttribute("data-openapi"),
    domNode: root,
    validatorUrl: null,
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout"
  });
})();
