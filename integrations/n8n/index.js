// n8n loads the nodes and credentials listed in package.json's "n8n" section.
module.exports = {};
