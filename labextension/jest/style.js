/** Stands in for an imported stylesheet. */
module.exports = {};
