/** Unit tests of the front end: `npm test`. */

// JupyterLab's packages ship ES modules; jest runs CommonJS, so ts-jest transpiles them too.
const ES_MODULE_PACKAGES = ['@jupyterlab', '@jupyter', '@microsoft', 'exenv-es6'];

module.exports = {
  testEnvironment: 'jsdom',
  roots: ['<rootDir>/src'],
  testRegex: '/__tests__/.*\\.spec\\.ts$',
  setupFiles: ['<rootDir>/jest/shim.js'],
  moduleNameMapper: {
    '\\.svg$': '<rootDir>/jest/svg.js',
    '\\.css$': '<rootDir>/jest/style.js'
  },
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }],
    '^.+\\.js$': [
      'ts-jest',
      { tsconfig: { allowJs: true, isolatedModules: true, module: 'commonjs', target: 'ES2018' } }
    ]
  },
  transformIgnorePatterns: [`/node_modules/(?!(${ES_MODULE_PACKAGES.join('|')})/)`]
};
